//! Markdown tables for the text output of list commands.

/// A Markdown table with a header row.
#[derive(Debug, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers.
    #[must_use]
    pub fn new(header: &[&str]) -> Self {
        Self {
            header: header.iter().map(|s| (*s).to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row (cells past the header's columns are not shown).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as Markdown, columns padded to their widest cell.
    #[must_use]
    pub fn render(&self) -> String {
        let cols = self.header.len();
        let mut width: Vec<usize> = self.header.iter().map(String::len).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(cols) {
                width[i] = width[i].max(c.len());
            }
        }
        let line = |cells: &[String]| {
            let padded: Vec<String> = (0..cols)
                .map(|i| {
                    format!(
                        "{:w$}",
                        cells.get(i).map_or("", String::as_str),
                        w = width[i]
                    )
                })
                .collect();
            format!("| {} |", padded.join(" | "))
        };
        let mut out = vec![line(&self.header)];
        out.push(format!(
            "|{}|",
            width
                .iter()
                .map(|w| "-".repeat(w + 2))
                .collect::<Vec<_>>()
                .join("|")
        ));
        out.extend(self.rows.iter().map(|r| line(r)));
        out.join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_aligned_markdown() {
        let mut t = Table::new(&["a", "long header"]);
        t.row(vec!["12345".into(), "x".into()]);
        assert_eq!(
            t.render(),
            "| a     | long header |\n|-------|-------------|\n| 12345 | x           |"
        );
    }
}
