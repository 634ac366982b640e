//! Model globs: `*` matches any run of characters, `?` any one character;
//! everything else matches itself, case-sensitively. The host validates
//! decisions with this same function, so policy and host always agree.

/// True when `text` matches `pattern`.
///
/// ```
/// use wasmgpu_policy_sdk::glob_match;
/// assert!(glob_match("NVIDIA H100*", "NVIDIA H100 80GB HBM3"));
/// assert!(glob_match("*A100*", "NVIDIA A100-SXM4-40GB"));
/// assert!(!glob_match("NVIDIA H100*", "NVIDIA A100-SXM4-40GB"));
/// ```
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    // Greedy matching with backtracking to the last `*`: linear in practice,
    // O(len(p) * len(t)) at worst.
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn literals_stars_and_questions() {
        assert!(glob_match("", ""));
        assert!(!glob_match("", "x"));
        assert!(glob_match("*", ""));
        assert!(glob_match("*", "anything at all"));
        assert!(glob_match("NVIDIA A100", "NVIDIA A100"));
        assert!(!glob_match("NVIDIA A100", "NVIDIA A100 80GB"));
        assert!(glob_match("NVIDIA A100*", "NVIDIA A100 80GB"));
        assert!(glob_match("*80GB*", "NVIDIA H100 80GB HBM3"));
        assert!(glob_match("NVIDIA ?100*", "NVIDIA H100 80GB HBM3"));
        assert!(!glob_match("NVIDIA ?100*", "NVIDIA L40S"));
        assert!(glob_match("a*b*c", "aXXbYYbZZc"));
        assert!(!glob_match("a*b*c", "aXXbYYbZZ"));
        assert!(
            !glob_match("nvidia*", "NVIDIA H100"),
            "matching is case-sensitive"
        );
    }
}
