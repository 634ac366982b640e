//! Model globs: `*` matches any run of characters, `?` any one character;
//! everything else matches itself, case-sensitively. The host validates
//! decisions with this same function, so policy and host always agree.

/// True when `text` matches `pattern`.
///
/// ```
/// use wasmgpu_contract::glob_match;
/// assert!(glob_match("NVIDIA H100*", "NVIDIA H100 80GB HBM3"));
/// assert!(glob_match("*A100*", "NVIDIA A100-SXM4-40GB"));
/// assert!(!glob_match("NVIDIA H100*", "NVIDIA A100-SXM4-40GB"));
/// ```
pub fn glob_match(pattern: &str, text: &str) -> bool {
    // Greedy matching with backtracking to the last `*`: linear in practice,
    // O(len(p) * len(t)) at worst. Positions are byte offsets at character
    // boundaries, so nothing is allocated (the host calls this per GPU).
    let next = |s: &str, at: usize| s[at..].chars().next();
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while let Some(t) = next(text, ti) {
        match next(pattern, pi) {
            Some(p) if p == '?' || p == t => {
                pi += p.len_utf8();
                ti += t.len_utf8();
            }
            Some('*') => {
                star = Some((pi, ti));
                pi += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    // Let the last `*` swallow one more character of the text.
                    let st = st + next(text, st).map_or(1, char::len_utf8);
                    pi = sp + 1;
                    ti = st;
                    star = Some((sp, st));
                }
                None => return false,
            },
        }
    }
    pattern[pi..].chars().all(|c| c == '*')
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
        assert!(glob_match("GPU-?é*", "GPU-xé-ü"), "characters, not bytes");
        assert!(!glob_match("GPU-?-*", "GPU-éé-x"));
        assert!(glob_match("*ü", "aüü"));
    }
}
