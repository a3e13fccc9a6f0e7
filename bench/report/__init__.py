"""Reports: runs on disk (results/runs/<run_id>/) -> paper-style tables and figures, ours beside the paper's; one
package per paper, one module per artifact (docs/reports.md). Nothing here imports torch, methods/ or the runner."""
