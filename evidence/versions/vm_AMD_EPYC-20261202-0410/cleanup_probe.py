"""Does this transformers apply the embedded tokenizer's clean_up_tokenization_spaces to a plain decode?
Run with the converted model folder (data/cache/models/SmolLM2-135M-Instruct.Q4_1-*) as its argument."""
import sys

import transformers
from transformers import AutoTokenizer

tok = AutoTokenizer.from_pretrained(sys.argv[1])
ids = tok("Hello , world ! a .b")["input_ids"]
print(transformers.__version__, repr(tok.decode(ids, skip_special_tokens=True)),
      repr(tok.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)))
