//! A plan's flows as their steps, for `tessera import --plan`: each step
//! with the task it becomes and what it reads (`name <- step path`) or
//! waits for (`after step`).

use tessera_importer::Plan;

/// The flows of `plan`, one block each; empty when it has none.
pub(super) fn render(plan: &Plan) -> String {
    let mut out = String::new();
    for flow in &plan.flows {
        out.push_str(&format!(
            "flow {} ({}:{})\n",
            flow.id,
            flow.source.file.display(),
            flow.source.line
        ));
        let width = flow.steps.iter().map(|s| s.name.len()).max().unwrap_or(0);
        let id_width = flow
            .steps
            .iter()
            .map(|s| s.task_id.len())
            .max()
            .unwrap_or(0);
        for s in &flow.steps {
            let reads: Vec<String> = s
                .consumes
                .iter()
                .map(|c| format!("{} <- {} {}", c.name, c.step, c.path))
                .chain(s.after.iter().map(|a| format!("after {a}")))
                .collect();
            let line = format!(
                "  {:<width$}  {:<id_width$}  {}",
                s.name,
                s.task_id,
                reads.join("; ")
            );
            out.push_str(line.trim_end());
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    #[test]
    fn the_example_flow_renders_as_its_steps() {
        let pack = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds/blueprint-flow");
        let plan = tessera_importer::plan(&pack).unwrap();
        assert_eq!(
            super::render(&plan),
            "flow change (pack.yaml:19)\n\
             \x20 design     change.design\n\
             \x20 implement  change.implement  plan <- design $.parts[\"plan.md\"]\n\
             \x20 review     change.review     notes <- implement $.out; patch <- implement $.parts[\"patch.diff\"]; plan <- design $.parts[\"plan.md\"]\n"
        );
    }
}
