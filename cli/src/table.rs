//! Plain-text tables (comfy-table): aligned columns, optional group headers,
//! fitted to the terminal's width when stdout is a terminal.

use std::io::IsTerminal;

use comfy_table::{CellAlignment, ColumnConstraint, ContentArrangement, TableComponent, Width};

use crate::output::escape;

/// A table of text cells. Cells are escaped (a control character never
/// splits a row); columns are padded to their widest cell and, on a
/// terminal, wrapped to fit its width.
#[derive(Debug, Clone, Default)]
pub struct Table {
    groups: Vec<(String, usize)>,
    headers: Vec<String>,
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

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
        let mut cells: Vec<String> = cells.into_iter().map(|c| escape(&c.into())).collect();
        cells.resize(self.headers.len(), String::new());
        self.rows.push(cells);
    }

    /// Whether the table has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table as lines of text, each ending in a newline, without
    /// trailing spaces; fitted to the terminal when stdout is one.
    pub fn render(&self) -> String {
        let width = std::io::stdout()
            .is_terminal()
            .then(terminal_width)
            .flatten();
        self.render_to(width)
    }

    /// The table laid out in `width` columns (`None`: as wide as its cells).
    fn render_to(&self, width: Option<u16>) -> String {
        let mut table = comfy_table::Table::new();
        table.load_preset(comfy_table::presets::NOTHING);
        table.set_style(TableComponent::HeaderLines, '-');
        table.set_style(TableComponent::MiddleHeaderIntersections, ' ');
        table.set_style(TableComponent::VerticalLines, ' ');
        table.force_no_tty();
        match width {
            Some(width) => {
                table.set_content_arrangement(ContentArrangement::Dynamic);
                table.set_width(width);
            }
            None => {
                table.set_content_arrangement(ContentArrangement::Disabled);
            }
        }
        table.set_header(self.headers.iter().map(|h| escape(h)));
        for row in &self.rows {
            table.add_row(row.clone());
        }
        let last = self.headers.len().saturating_sub(1);
        let mut widths: Vec<usize> = self.headers.iter().map(|h| chars(h)).collect();
        for row in &self.rows {
            for (slot, cell) in widths.iter_mut().zip(row) {
                *slot = (*slot).max(chars(cell));
            }
        }
        let floors = self.group_floors(&widths);
        for (index, column) in table.column_iter_mut().enumerate() {
            // One space of padding plus the one-space line: two between columns.
            let padding = u16::from(index < last);
            column.set_padding((0, padding));
            if self.right.get(index).copied().unwrap_or(false) {
                column.set_cell_alignment(CellAlignment::Right);
            }
            if let Some(Some(floor)) = floors.get(index) {
                // The boundary counts the padding too.
                let floor = floor.saturating_add(padding);
                column.set_constraint(ColumnConstraint::LowerBoundary(Width::Fixed(floor)));
            }
        }
        let mut lines: Vec<String> = table.lines().map(|l| l.trim_end().to_owned()).collect();
        if let Some(rule) = lines.get_mut(1) {
            *rule = gap_rule(rule);
        }
        let mut out = String::new();
        if !self.groups.is_empty() {
            // The rule under the headers shows where each column starts.
            let rule = lines.get(1).map_or("", String::as_str);
            push_line(&mut out, &self.group_line(rule));
        }
        for line in &lines {
            push_line(&mut out, line);
        }
        out
    }

    /// The least width of each column so every group label fits above its
    /// span: the first column of a span takes what is missing.
    fn group_floors(&self, widths: &[usize]) -> Vec<Option<u16>> {
        let mut floors = vec![None; widths.len()];
        let mut column = 0;
        for (label, span) in &self.groups {
            let end = (column + span).min(widths.len());
            if end == column {
                break;
            }
            let spanned = widths[column..end].iter().sum::<usize>() + 2 * (end - column - 1);
            let needed = chars(label);
            if needed > spanned {
                floors[column] = u16::try_from(widths[column] + needed - spanned).ok();
            }
            column = end;
        }
        floors
    }

    /// The group labels, each starting above the first column of its span.
    fn group_line(&self, rule: &str) -> String {
        let mut starts = Vec::new();
        let mut previous = ' ';
        for (offset, c) in rule.chars().enumerate() {
            if c == '-' && previous != '-' {
                starts.push(offset);
            }
            previous = c;
        }
        let mut line = String::new();
        let mut column = 0;
        for (label, span) in &self.groups {
            if let Some(start) = starts.get(column) {
                let fill = start.saturating_sub(chars(&line));
                line.push_str(&" ".repeat(fill));
                line.push_str(&escape(label));
            }
            column += span;
        }
        line
    }
}

/// The rule under the headers with the padding of each column blank, so
/// columns stay two spaces apart in it too (`-----  ----`).
fn gap_rule(rule: &str) -> String {
    let chars: Vec<char> = rule.chars().collect();
    chars
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            let next_is_gap = chars.get(i + 1) == Some(&' ');
            let prev_is_dash = i > 0 && chars.get(i - 1) == Some(&'-');
            if c == '-' && next_is_gap && prev_is_dash {
                ' '
            } else {
                c
            }
        })
        .collect()
}

/// The terminal's width in columns, if it can be read.
fn terminal_width() -> Option<u16> {
    comfy_table::Table::new().width()
}

fn chars(text: &str) -> usize {
    text.chars().count()
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
            table.render_to(None),
            "name      n\n-----  ----\nalpha     1\nb      1000\n"
        );
    }

    #[test]
    fn groups_span_columns_and_widen_them() {
        let mut table = Table::new(["op", "a", "b"])
            .groups(vec![(String::new(), 1), ("a long group".into(), 2)]);
        table.row(["x", "1", "2"]);
        let text = table.render_to(None);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "    a long group", "{text}");
        assert_eq!(lines[1], "op  a          b", "{text}");
        assert_eq!(lines[3], "x   1          2", "{text}");
    }

    #[test]
    fn short_rows_are_padded_and_long_ones_cut() {
        let mut table = Table::new(["a", "b"]);
        table.row(["1"]);
        table.row(["1", "2", "3"]);
        assert_eq!(table.render_to(None), "a  b\n-  -\n1\n1  2\n");
        assert!(!table.is_empty());
        assert_eq!(or_dash(None::<u8>), "-");
        assert_eq!(or_dash(Some(3)), "3");
    }

    #[test]
    fn control_characters_never_split_a_row() {
        let mut table = Table::new(["session", "head"]);
        table.row(["evil\nid", "1"]);
        let text = table.render_to(None);
        assert_eq!(text.lines().count(), 3, "{text}");
        assert!(text.contains("evil\\nid"), "{text}");
    }

    #[test]
    fn a_narrow_terminal_wraps_cells_instead_of_lines() {
        let mut table = Table::new(["index", "payload"]);
        table.row(["1", &"x".repeat(100)]);
        let text = table.render_to(Some(40));
        assert!(text.lines().all(|l| l.chars().count() <= 40), "{text}");
        assert!(text.lines().count() > 3, "{text}");
    }
}
