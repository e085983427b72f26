//! Whether a payload is large enough to offload, found without a copy or
//! a hash.

use std::io::Write;

use serde_json::Value;

/// Whether `value`'s JSON is longer than `threshold` bytes, found without
/// a copy or a hash: first from the lengths of its strings and keys alone
/// (a lower bound of the JSON's length, so a large payload is known at
/// once, without scanning its text), else by serializing into a counter
/// that stops at the threshold.
pub(super) fn exceeds(value: &Value, threshold: usize) -> bool {
    text_over(value, threshold) || serializes_over(value, threshold)
}

/// Whether the strings and keys of `value` alone hold more than `budget`
/// bytes (their JSON is at least as long); stops as soon as they do.
fn text_over(value: &Value, budget: usize) -> bool {
    let mut left = budget;
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        let text = match value {
            Value::String(text) => text.len(),
            Value::Array(items) => {
                stack.extend(items);
                0
            }
            Value::Object(map) => {
                stack.extend(map.values());
                map.keys().map(String::len).sum()
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => 0,
        };
        match left.checked_sub(text) {
            Some(rest) => left = rest,
            None => return true,
        }
    }
    false
}

/// Whether `value` serializes to more than `threshold` bytes: serialized
/// into a counter that keeps nothing and stops at the threshold.
fn serializes_over(value: &Value, threshold: usize) -> bool {
    struct Counting {
        left: usize,
    }
    impl Write for Counting {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            match self.left.checked_sub(buf.len()) {
                Some(left) => {
                    self.left = left;
                    Ok(buf.len())
                }
                None => Err(std::io::Error::other("over the threshold")),
            }
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    // Any error is the threshold's: a `Value` serializes.
    serde_json::to_writer(&mut Counting { left: threshold }, value).is_err()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn exceeds_counts_the_json_bytes() {
        let value = json!({"a": "xyz"});
        let len = serde_json::to_vec(&value).unwrap().len();
        assert!(!exceeds(&value, len));
        assert!(exceeds(&value, len - 1));
        assert!(exceeds(&value, 0));
        // Past the threshold on its strings alone, or only with its syntax.
        let long = json!({"k": "x".repeat(100)});
        assert!(text_over(&long, 100));
        assert!(exceeds(&long, 100));
        let many = json!([[1, 2, 3], [4, 5, 6]]);
        assert!(!text_over(&many, 1));
        assert!(exceeds(&many, 16));
        assert!(!exceeds(&many, 17));
    }
}
