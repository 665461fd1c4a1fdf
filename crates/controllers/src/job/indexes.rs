//! Sets of completion indexes as a Job's status writes them (`completedIndexes`,
//! `failedIndexes`): increasing, comma-separated, three or more consecutive numbers written as
//! `first-last` ("1,3-5,7"), as kube-controller-manager's `orderedIntervals` does.

use std::collections::BTreeSet;

/// Parse `text` ("0-2,5") into its indexes below `completions`; parts that do not parse, or lie
/// at or above `completions`, are left out (as the Job controller does).
pub fn parse(text: Option<&str>, completions: i32) -> BTreeSet<i32> {
    let mut found = BTreeSet::new();
    for part in text.unwrap_or_default().split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse::<i32>(), b.trim().parse::<i32>()),
            None => (part.parse::<i32>(), part.parse::<i32>()),
        };
        let (Ok(first), Ok(last)) = (first, last) else { continue };
        if first < 0 || last < first {
            continue;
        }
        found.extend((first..=last).take_while(|i| *i < completions));
    }
    found
}

/// Write `indexes` as the status does; `None` when there are none.
pub fn format(indexes: &BTreeSet<i32>) -> Option<String> {
    let mut parts = Vec::new();
    let mut iter = indexes.iter().copied().peekable();
    while let Some(first) = iter.next() {
        let mut last = first;
        while iter.peek() == Some(&(last + 1)) {
            last += 1;
            iter.next();
        }
        match last - first {
            0 => parts.push(first.to_string()),
            1 => parts.push(format!("{first},{last}")),
            _ => parts.push(format!("{first}-{last}")),
        }
    }
    (!parts.is_empty()).then(|| parts.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_are_written_as_compressed_ranges_and_read_back() {
        let set: BTreeSet<i32> = [0, 1, 2, 5, 7, 8].into_iter().collect();
        assert_eq!(format(&set).as_deref(), Some("0-2,5,7,8"));
        assert_eq!(parse(Some("0-2,5,7,8"), 10), set);
        assert_eq!(format(&BTreeSet::new()), None);
        assert_eq!(parse(None, 3), BTreeSet::new());
        assert_eq!(parse(Some("1,3-5,x,9"), 5), [1, 3, 4].into_iter().collect());
        assert_eq!(format(&[1, 3, 4, 5, 7].into_iter().collect()).as_deref(), Some("1,3-5,7"));
    }
}
