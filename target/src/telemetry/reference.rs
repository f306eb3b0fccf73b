//! The metrics reference (docs/metrics.md), drawn from the collectors'
//! own descriptions: what `/metrics` can hold, with its labels and help, so
//! the document cannot drift from the code.

use prometheus::core::Collector;

/// The reference table of every metric of `collectors`, sorted by name:
/// one Markdown row per family (name, labels, what it counts).
pub fn markdown(collectors: &[&dyn Collector]) -> String {
    let mut rows: Vec<(String, String, String)> = collectors
        .iter()
        .flat_map(|c| c.desc())
        .map(|d| {
            let labels = d
                .variable_labels
                .iter()
                .map(|l| format!("`{l}`"))
                .collect::<Vec<_>>()
                .join(", ");
            (d.fq_name.clone(), labels, d.help.replace('|', "\\|"))
        })
        .collect();
    rows.sort();
    rows.dedup_by(|a, b| a.0 == b.0);
    let mut out = String::from("| metric | labels | what |\n|---|---|---|\n");
    for (name, labels, help) in rows {
        out.push_str(&format!("| `{name}` | {labels} | {help} |\n"));
    }
    out
}
