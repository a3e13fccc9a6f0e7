"""Training: the drafters distilled from their target, each by `make draft` or `make heads` (scripts/).

- draft distillation: `draft_data` (data), `draft` (training, evaluation, report), `draft_choice` (predicted speedup);
- Medusa heads: `heads_data` (data), `heads` (training, evaluation, report);
- ProPD's early heads: `early_heads`, on the Medusa heads' data.

They share one self-distillation generator (`selfdistill`: prompts no benchmark evaluates, the target's batched
answers, caches through bench.cachefile), one training loop (`loop`) and the recipe helpers (`recipes`). What runs
at decode time (loading a draft or heads, their modules, trimmed vocabularies) stays in bench/models; nothing but
scripts/ and tests/ imports this package, and it imports neither methods/ nor the reports.
"""
