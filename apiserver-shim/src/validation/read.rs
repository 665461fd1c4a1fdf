//! Comparing values as Go's `equality.Semantic` does: unset and the zero value are the same.

/// Whether two optional fields of a typed object are equal as Go's `equality.Semantic` sees
/// them: unset and the zero value (an empty string, map or list) are the same.
pub(crate) fn same<T: Default + PartialEq>(a: Option<&T>, b: Option<&T>) -> bool {
    let zero = T::default();
    a.unwrap_or(&zero) == b.unwrap_or(&zero)
}
