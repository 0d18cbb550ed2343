//! The tables tritonserver logs once start-up has loaded the models: the backends in use, every
//! model version with its state, and the server's options. Operators read the start-up state from
//! them at a glance (and Triton's QA counts on their lines).
//!
//! Each table is one log message laid out over several lines, under [`TABLE_TARGET`], which the
//! log formatter writes unescaped, as tritonserver does; so every cell is escaped here instead, and
//! no model name or load error can start a line of its own.
use crate::control::ControlMode;
use crate::server::{EXTENSIONS, Server};

/// The log target of a table: its message is written as it is.
pub const TABLE_TARGET: &str = "nereus::table";

/// A table as tritonserver's `TablePrinter` draws it: a row divider, the headers, a divider, the
/// rows, a divider, each column as wide as its widest cell.
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&str]) -> Self {
        Table { headers: headers.iter().map(|h| h.to_string()).collect(), rows: Vec::new() }
    }

    /// Adds a row; missing cells are empty, extra ones dropped.
    pub fn row<S: AsRef<str>>(&mut self, cells: impl IntoIterator<Item = S>) {
        let mut row: Vec<String> = cells.into_iter().map(|c| escape_cell(c.as_ref())).collect();
        row.resize(self.headers.len(), String::new());
        self.rows.push(row);
    }

    /// The table's text, starting on a line of its own after the log line's prefix.
    pub fn render(&self) -> String {
        let widths: Vec<usize> = (0..self.headers.len())
            .map(|i| {
                std::iter::once(&self.headers[i])
                    .chain(self.rows.iter().map(|r| &r[i]))
                    .map(|c| c.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let divider: String = widths.iter().fold("+".to_string(), |mut d, w| {
            d.push_str(&"-".repeat(w + 2));
            d.push('+');
            d
        });
        let line = |cells: &[String]| {
            cells.iter().zip(&widths).fold("|".to_string(), |mut l, (c, w)| {
                l.push(' ');
                l.push_str(c);
                l.push_str(&" ".repeat(w - c.chars().count()));
                l.push_str(" |");
                l
            })
        };
        let mut out = format!("\n{divider}\n{}\n{divider}\n", line(&self.headers));
        for row in &self.rows {
            out.push_str(&line(row));
            out.push('\n');
        }
        out.push_str(&divider);
        out.push('\n');
        out
    }

    /// Logs the table at INFO, as one message.
    pub fn log(&self) {
        tracing::info!(target: TABLE_TARGET, "{}", self.render());
    }
}

/// A cell's text with control characters (line breaks included) written as escapes.
fn escape_cell(text: &str) -> String {
    text.chars().fold(String::with_capacity(text.len()), |mut out, c| {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
        out
    })
}

/// The backends the loaded models use: name, where it comes from, its settings.
pub fn backends(server: &Server) -> Table {
    let mut table = Table::new(&["Backend", "Path", "Config"]);
    for (name, summary) in server.backends_in_use() {
        table.row([name, summary.path, summary.config]);
    }
    table
}

/// Every model version the repositories hold, with its state and, when not ready, why; a model
/// without versions has one row saying so.
pub fn models(server: &Server) -> Table {
    let mut table = Table::new(&["Model", "Version", "Status"]);
    for m in server.index(false) {
        let version = if m.version.is_empty() { "-".to_string() } else { m.version };
        let status = if m.reason.is_empty() { m.state } else { format!("{}: {}", m.state, m.reason) };
        table.row([m.name, version, status]);
    }
    table
}

/// The server's options: tritonserver's rows where Nereus has the setting, then its own.
pub fn options(server: &Server) -> Table {
    let o = server.options();
    let mut table = Table::new(&["Option", "Value"]);
    table.row(["server_id", &o.id]);
    table.row(["server_version", env!("CARGO_PKG_VERSION")]);
    table.row(["server_extensions".to_string(), EXTENSIONS.join(" ")]);
    for (i, location) in o.model_repositories.iter().enumerate() {
        table.row([format!("model_repository_path[{i}]"), location.to_string()]);
    }
    let mode = match o.control_mode {
        ControlMode::None => "MODE_NONE",
        ControlMode::Poll { .. } => "MODE_POLL",
        ControlMode::Explicit => "MODE_EXPLICIT",
    };
    table.row(["model_control_mode", mode]);
    for (i, model) in o.load_models.iter().enumerate() {
        table.row([format!("startup_models_{i}"), model.clone()]);
    }
    table.row(["strict_model_config", if o.autocomplete { "0" } else { "1" }]);
    table.row(["model_config_name", o.model_config_name.as_deref().unwrap_or("")]);
    table.row(["rate_limit", "OFF"]);
    table.row(["strict_readiness", if o.strict_readiness { "1" } else { "0" }]);
    table.row(["exit_timeout".to_string(), o.exit_timeout.as_secs().to_string()]);
    table.row(["cache_enabled", if o.response_cache.is_some() { "1" } else { "0" }]);
    let l = &o.sandbox_limits;
    table.row(["sandbox_max_memory_mb".to_string(), (l.max_memory_bytes >> 20).to_string()]);
    table.row(["sandbox_max_execution_timeout_ms".to_string(), l.max_execution_timeout.as_millis().to_string()]);
    table.row(["sandbox_max_instances".to_string(), l.max_instances.to_string()]);
    table.row(["sandbox_total_instances".to_string(), l.total_instances.to_string()]);
    table.row(["sandbox_total_memory_mb".to_string(), (l.total_memory_bytes >> 20).to_string()]);
    table
}

/// Logs the three tables in tritonserver's order.
pub fn log(server: &Server) {
    backends(server).log();
    models(server).log();
    options(server).log();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_tritonservers_table() {
        let mut t = Table::new(&["Model", "Version", "Status"]);
        t.row(["simple", "1", "READY"]);
        let want = "
+--------+---------+--------+
| Model  | Version | Status |
+--------+---------+--------+
| simple | 1       | READY  |
+--------+---------+--------+
";
        assert_eq!(t.render(), want);
    }

    #[test]
    fn cells_cannot_start_lines() {
        let mut t = Table::new(&["Model", "Status"]);
        t.row(["m", "UNAVAILABLE: bad\nI1125 00:00:00.000000 1 forged.rs:1] \"ready\"\r"]);
        let text = t.render();
        assert_eq!(text.lines().count(), 6, "{text}");
        assert!(text.contains(r#"bad\nI1125"#), "{text}");
        assert!(text.contains(r#"\r |"#), "{text}");
    }
}
