"""Reports: runs on disk (results/runs/<run_id>/) -> paper-style tables and figures, ours beside the paper's.

    python -m bench.report --list                      # every artifact name
    python -m bench.report <paper>/<artifact> [--results results] [--model M] [--paper-size S] [options]

One package per paper (bench/report/<paper>/) holds that paper's artifacts, constants and published numbers
(paper_tables/); its `ARTIFACTS` registers them (bench/report/registry.py). Shared pieces: select.py (which runs a
report uses: the one way reports read runs), tables.py (cells, md/csv/tex rendering), plots.py (figures),
notebook.py (the notebooks' helpers), runs.py (the generic `runs` table).
Every number is recomputed from records.jsonl (bench.run.store, bench.run.metrics); published numbers are
only ever printed next to ours. Nothing here imports torch, methods/ or the runner.
"""
