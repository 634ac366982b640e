//! Plain-text tables for terminal output.

/// Longest cell shown, in characters; longer cells are cut with `…`, so one
/// huge value cannot widen every row of its column.
pub(crate) const MAX_CELL_CHARS: usize = 1024;

/// A table with a header row; columns are padded to their widest cell.
pub(crate) struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    pub(crate) fn new(header: &[&str]) -> Self {
        Table {
            rows: vec![header.iter().map(|h| h.to_string()).collect()],
        }
    }

    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells.into_iter().map(cut).collect());
    }

    pub(crate) fn render(&self) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|c| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(c))
                    .map(|s| s.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                line.push_str(cell);
                if c + 1 < row.len() {
                    // Padded by hand: `format!("{:<w$}")` panics for widths
                    // above 65,535.
                    let pad = widths[c] - cell.chars().count() + 2;
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `cell`, cut to [`MAX_CELL_CHARS`] characters with `…` when longer.
fn cut(cell: String) -> String {
    match cell.char_indices().nth(MAX_CELL_CHARS - 1) {
        Some((end, _)) if cell.chars().count() > MAX_CELL_CHARS => {
            format!("{}…", &cell[..end])
        }
        _ => cell,
    }
}

/// `sha256:` and the first 12 hex digits.
pub(crate) fn short(digest: &str) -> String {
    digest.chars().take("sha256:".len() + 12).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pads_columns() {
        let mut t = Table::new(&["POD", "NODE"]);
        t.row(vec!["ns/a-long-name".into(), "n1".into()]);
        assert_eq!(t.render(), "POD             NODE\nns/a-long-name  n1\n");
    }

    #[test]
    fn huge_cells_are_cut_not_a_panic() {
        let mut t = Table::new(&["POD", "NODE", "REASON"]);
        let huge = "é".repeat(70_000);
        t.row(vec![huge.clone(), "n1".into(), huge]);
        let text = t.render();
        let row = text.lines().nth(1).unwrap();
        let cells: Vec<&str> = row.split("  ").filter(|c| !c.is_empty()).collect();
        assert_eq!(cells.len(), 3, "{}", &row[..80]);
        for cell in [cells[0], cells[2]] {
            assert_eq!(cell.chars().count(), MAX_CELL_CHARS);
            assert!(cell.ends_with("é…"));
        }
        assert_eq!(cells[1], "n1");
        // The header is padded to the cut width (in characters).
        let header = text.lines().next().unwrap();
        let column = |line: &str, cell: &str| line[..line.find(cell).unwrap()].chars().count();
        assert_eq!(column(header, "NODE"), MAX_CELL_CHARS + 2);
        assert_eq!(column(row, "n1"), MAX_CELL_CHARS + 2);
    }
}
