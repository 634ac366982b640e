//! Text cut to a bound, the one way every bounded field is cut.

/// `text`, cut to at most `max` bytes plus `…` at a character boundary.
pub fn cut(text: &mut String, max: usize) {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
}

#[cfg(test)]
mod tests {
    use super::cut;

    #[test]
    fn cuts_at_a_character_boundary_and_marks_the_cut() {
        let mut short = "abc".to_owned();
        cut(&mut short, 3);
        assert_eq!(short, "abc");
        let mut long = "aé€z".to_owned(); // 1 + 2 + 3 + 1 bytes
        cut(&mut long, 4);
        assert_eq!(long, "aé…");
    }
}
