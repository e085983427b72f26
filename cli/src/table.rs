//! Plain-text tables for terminals: aligned columns, optional group headers.

/// A table of text cells, rendered with columns padded to their widest cell.
#[derive(Debug, Clone, Default)]
pub struct Table {
    groups: Vec<(String, usize)>,
    headers: Vec<String>,
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

const GAP: &str = "  ";

impl Table {
    /// A table with these column headers, every column left-aligned.
    pub fn new<S: Into<String>>(headers: impl IntoIterator<Item = S>) -> Self {
        let headers: Vec<String> = headers.into_iter().map(Into::into).collect();
        let right = vec![false; headers.len()];
        Self {
            headers,
            right,
            ..Self::default()
        }
    }

    /// Right-aligns the given columns (numbers).
    pub fn right_align(mut self, columns: impl IntoIterator<Item = usize>) -> Self {
        for column in columns {
            if let Some(slot) = self.right.get_mut(column) {
                *slot = true;
            }
        }
        self
    }

    /// Adds a header line above the column headers: each `(label, span)`
    /// covers the next `span` columns.
    pub fn groups(mut self, groups: Vec<(String, usize)>) -> Self {
        self.groups = groups;
        self
    }

    /// Adds a row; missing cells are blank, extra cells are dropped.
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        let mut cells: Vec<String> = cells.into_iter().map(Into::into).collect();
        cells.resize(self.headers.len(), String::new());
        self.rows.push(cells);
    }

    /// Whether the table has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table as lines of text, each ending in a newline, without trailing spaces.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| width(h)).collect();
        for row in &self.rows {
            for (slot, cell) in widths.iter_mut().zip(row) {
                *slot = (*slot).max(width(cell));
            }
        }
        self.widen_for_groups(&mut widths);
        let mut out = String::new();
        if !self.groups.is_empty() {
            let mut line = String::new();
            let mut column = 0;
            for (label, span) in &self.groups {
                let end = (column + span).min(widths.len());
                let spanned: usize = widths[column..end].iter().sum::<usize>()
                    + GAP.len() * end.saturating_sub(column + 1);
                if column > 0 {
                    line.push_str(GAP);
                }
                line.push_str(&pad(label, spanned, false));
                column = end;
            }
            push_line(&mut out, &line);
        }
        push_line(&mut out, &self.line(&self.headers, &widths));
        let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
        push_line(&mut out, &rule.join(GAP));
        for row in &self.rows {
            push_line(&mut out, &self.line(row, &widths));
        }
        out
    }

    fn widen_for_groups(&self, widths: &mut [usize]) {
        let mut column = 0;
        for (label, span) in &self.groups {
            let end = (column + span).min(widths.len());
            if end == column {
                break;
            }
            let spanned: usize =
                widths[column..end].iter().sum::<usize>() + GAP.len() * (end - column - 1);
            let needed = width(label);
            if needed > spanned {
                // Widen the first column of the span, so the columns under
                // a long label stay together on the right.
                widths[column] += needed - spanned;
            }
            column = end;
        }
    }

    fn line(&self, cells: &[String], widths: &[usize]) -> String {
        let padded: Vec<String> = cells
            .iter()
            .zip(widths)
            .zip(&self.right)
            .map(|((cell, w), right)| pad(cell, *w, *right))
            .collect();
        padded.join(GAP)
    }
}

fn width(text: &str) -> usize {
    text.chars().count()
}

fn pad(text: &str, to: usize, right: bool) -> String {
    let fill = " ".repeat(to.saturating_sub(width(text)));
    if right {
        format!("{fill}{text}")
    } else {
        format!("{text}{fill}")
    }
}

fn push_line(out: &mut String, line: &str) {
    out.push_str(line.trim_end());
    out.push('\n');
}

/// A cell for an optional value: the value, or `-`.
pub fn or_dash<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align() {
        let mut table = Table::new(["name", "n"]).right_align([1]);
        table.row(["alpha", "1"]);
        table.row(["b", "1000"]);
        assert_eq!(
            table.render(),
            "name      n\n-----  ----\nalpha     1\nb      1000\n"
        );
    }

    #[test]
    fn groups_span_columns_and_widen_them() {
        let mut table = Table::new(["op", "a", "b"])
            .groups(vec![(String::new(), 1), ("a long group".into(), 2)]);
        table.row(["x", "1", "2"]);
        let text = table.render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "    a long group");
        assert_eq!(lines[1], "op  a          b");
        assert_eq!(lines[3], "x   1          2");
    }

    #[test]
    fn short_rows_are_padded_and_long_ones_cut() {
        let mut table = Table::new(["a", "b"]);
        table.row(["1"]);
        table.row(["1", "2", "3"]);
        assert_eq!(table.render(), "a  b\n-  -\n1\n1  2\n");
        assert!(!table.is_empty());
        assert_eq!(or_dash(None::<u8>), "-");
        assert_eq!(or_dash(Some(3)), "3");
    }
}
