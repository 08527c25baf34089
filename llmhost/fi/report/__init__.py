"""fi_report.html and fi_summary.json from the Phase 4 result documents: page assembly, figures, diagrams and one
module per section. Reads only the results directory, never a GPU or a server."""
