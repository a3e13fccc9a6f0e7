"""Reports: runs on disk (results/runs/<run_id>/) -> paper-style tables and figures, ours beside the paper's.

    python -m bench.report --list                      # every artifact name
    python -m bench.report <paper>/<artifact> [--results results] [--model M] [--paper-size S] [options]

One package per paper (bench/report/<paper>/): its `__init__.py` holds the paper's facts (CONTENTS, CLAIMED), each
module one artifact and its declaration (`ARTIFACT`, bench/report/registry.py), paper_tables/ the published numbers.
Shared pieces: select.py (RunSet: which runs a report uses, the one rule; the footer), output.py (Report and its one
writer), tables.py (cells, md/csv/tex rendering), plots.py (figures), notebook.py (the notebooks' sections),
makefile.py (the generated make targets), reproduced.py (REPRODUCED.md), generic.py (the artifacts of no paper).
Every number is recomputed from records.jsonl (bench.run.store, bench.run.metrics); published numbers are only ever
printed next to ours. Nothing here imports torch, methods/ or the runner.
"""
