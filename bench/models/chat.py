"""Chat formatting of a prompt-turn. Multi-turn prompts carry the model's own earlier answers."""

from __future__ import annotations

from bench.errors import HarnessError

VICUNA_SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the user's questions."
)


def vicuna_v11(history: list[tuple[str, str]], question: str) -> str:
    """FastChat's vicuna_v1.1 template, as Spec-Bench and Token Recycling prompt Vicuna."""
    text = VICUNA_SYSTEM + " "
    for user, assistant in history:
        text += f"USER: {user} ASSISTANT: {assistant}</s>"
    return text + f"USER: {question} ASSISTANT:"


def answer_text(tokenizer, ids) -> str:
    """A generated answer as the next turn's history: its text verbatim. clean_up_tokenization_spaces (true in the
    embedded GGUF's tokenizer) removes spaces before punctuation; transformers 5.6 applied it to BPE tokenizers, so
    the second turn's prompt depended on the release, and 5.7 on skip it there but warn at a run's first decode
    (evidence/versions/vm_AMD_EPYC-20261202-0410/cleanup_probe.txt)."""
    return tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)


def prompt_ids(tokenizer, template: str, history: list[tuple[str, str]], question: str) -> list[int]:
    if template == "tokenizer":
        messages = []
        for user, assistant in history:
            messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
        messages.append({"role": "user", "content": question})
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
    if template == "vicuna_v1.1":
        return tokenizer(vicuna_v11(history, question)).input_ids  # BOS added by the tokenizer
    if template == "none":
        text = "".join(u + a for u, a in history) + question
        return tokenizer(text).input_ids
    raise HarnessError(f"unknown chat_template '{template}' (known: tokenizer, vicuna_v1.1, none)")
