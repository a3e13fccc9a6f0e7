"""Models: loading targets and drafts (HF hub, local path, packaged GGUF), chat templates, draft training."""
