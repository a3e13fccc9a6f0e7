"""Models: loading targets, drafts and heads (HF hub, local path, packaged GGUF), chat templates, vocabularies,
the forward cost. Training them is bench/train."""
