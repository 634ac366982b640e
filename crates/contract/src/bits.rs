//! Bit sets as the contract carries them: node sets as `list<u64>` words
//! (bit i of word i/64 is node i), NVLink peers as one `u64` (bit i is the
//! GPU whose index is i).

/// Words enough for `len` members.
pub fn words_for(len: usize) -> usize {
    len.div_ceil(64)
}

/// A set of `len` possible members holding `members` (each below `len`).
pub fn from_indices(len: usize, members: impl IntoIterator<Item = u32>) -> Vec<u64> {
    let mut words = vec![0; words_for(len)];
    for member in members {
        insert(&mut words, member);
    }
    words
}

/// Adds `member`, growing the set when it is past its words.
pub fn insert(words: &mut Vec<u64>, member: u32) {
    let (word, bit) = (member as usize / 64, member % 64);
    if word >= words.len() {
        words.resize(word + 1, 0);
    }
    words[word] |= 1 << bit;
}

/// Whether `member` is in the set.
pub fn contains(words: &[u64], member: u32) -> bool {
    words
        .get(member as usize / 64)
        .is_some_and(|word| word & (1 << (member % 64)) != 0)
}

/// The members, ascending.
pub fn indices(words: &[u64]) -> impl Iterator<Item = u32> + '_ {
    words.iter().enumerate().flat_map(|(w, &word)| {
        let mut rest = word;
        std::iter::from_fn(move || {
            (rest != 0).then(|| {
                let bit = rest.trailing_zeros();
                rest &= rest - 1;
                w as u32 * 64 + bit
            })
        })
    })
}

/// How many members.
pub fn count(words: &[u64]) -> u32 {
    words.iter().map(|w| w.count_ones()).sum()
}

/// An NVLink set (one word) of GPU indices; indices of 64 and more are
/// left out (no node has that many GPUs).
pub fn nvlink_of(indices: impl IntoIterator<Item = u32>) -> u64 {
    indices
        .into_iter()
        .filter(|&i| i < 64)
        .fold(0, |set, i| set | 1 << i)
}

/// The GPU indices of an NVLink set, ascending.
pub fn nvlink_indices(set: u64) -> impl Iterator<Item = u32> {
    indices(std::slice::from_ref(&set))
        .collect::<Vec<_>>()
        .into_iter()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_go_in_and_come_out_in_order() {
        let set = from_indices(130, [129, 0, 64, 63]);
        assert_eq!(set.len(), 3);
        assert_eq!(indices(&set).collect::<Vec<_>>(), [0, 63, 64, 129]);
        assert!(contains(&set, 64) && !contains(&set, 65) && !contains(&set, 4000));
        assert_eq!(count(&set), 4);
        assert_eq!(words_for(0), 0);
        assert_eq!(words_for(64), 1);
        assert_eq!(words_for(65), 2);
    }

    #[test]
    fn nvlink_sets_hold_indices_below_64() {
        let set = nvlink_of([1, 7, 63, 64]);
        assert_eq!(nvlink_indices(set).collect::<Vec<_>>(), [1, 7, 63]);
    }
}
