"""The first HumanEval prompt's first 12 ids, with the embedded model's tokenizer converted from its GGUF into a
fresh folder and reloaded, as the harness does (bisect.sh runs it under one transformers release at a time)."""

import tempfile

import transformers

from bench.models.chat import prompt_ids
from bench.models.loading import load_tokenizer
from data.loaders import load_items
from tests.conftest import compose_cfg

tok = load_tokenizer(compose_cfg("model=smollm2-135m").model, tempfile.mkdtemp())
items = load_items(compose_cfg("dataset=humaneval").dataset, None, "/nonexistent")[:1]
print(transformers.__version__, type(tok).__name__, prompt_ids(tok, "tokenizer", [], items[0]["turns"][0])[:12])
