"""The one decode loop shared by all proposer methods.

Per step: the proposer drafts a tree rooted at the last committed token; one target forward runs over
root + draft with tree attention (a 4D additive mask, position ids = prefix length + depth); at temperature 0
the verifier keeps the longest path matching the target's greedy choices, above 0 the stochastic verifier
(bench.core.sampling) walks the tree with the proposer's rule and samples the bonus token; the KV cache is compacted to prefix +
accepted path; the accepted drafts plus the bonus token are committed. Stops at EOS or max_new_tokens,
never past it. The prefill's first token counts as one step of one token, so sum(accept_lengths) equals
the number of new tokens for every method, AR included (MAT = 1.00 for AR by construction).
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from bench.core.forward import TargetForward, full_forward
from bench.core.kv import keep_accepted
from bench.core.proposer import Acceptance, Generation, Proposer, StepContext
from bench.core.sampling import sample, stochastic_accept, target_probs
from bench.core.timing import Timer
from bench.core.verify import greedy_accept


class Engine:
    def __init__(self, model, eos_token_ids: list[int], max_context: int, temperature: float = 0.0,
                 forward: TargetForward = full_forward):
        self.model = model
        self.forward = forward  # the seam: every target forward of the loop goes through it
        self.eos = torch.tensor(sorted(set(eos_token_ids)), dtype=torch.long, device=model.device)
        self.max_context = max_context
        self.device = model.device
        self.dtype = model.dtype
        if temperature < 0:
            raise ValueError("temperature must be >= 0")
        self.temperature = float(temperature)
        # One generator for the target's and the proposer's sampling; the runner reseeds it per prompt-turn
        # so a sampled output does not depend on which prompts ran before it.
        self.generator = torch.Generator(device=model.device)

    def reseed(self, seed: int) -> None:
        self.generator.manual_seed(seed)

    def _pick(self, logits: torch.Tensor) -> torch.Tensor:
        """The next token from one row of logits: argmax at temperature 0, else a sample."""
        if self.temperature == 0:
            return logits.argmax()
        return torch.tensor(sample(target_probs(logits, self.temperature), self.generator), device=self.device)

    @torch.inference_mode()
    def generate(self, proposer: Proposer, prompt_ids: list[int], max_new_tokens: int, timer: Timer) -> Generation:
        model, device = self.model, self.device
        n_prompt = len(prompt_ids)
        if max_new_tokens < 1:
            raise ValueError("max_new_tokens must be at least 1")
        if n_prompt + 1 > self.max_context:
            raise RuntimeError(f"prompt of {n_prompt} tokens exceeds the model context ({self.max_context} tokens)")
        # Committed tokens (prompt + output) live in one preallocated buffer; seq[:length] is valid.
        seq = torch.zeros(n_prompt + max_new_tokens, dtype=torch.long, device=device)
        seq[:n_prompt] = torch.tensor(prompt_ids, dtype=torch.long)
        cache = DynamicCache(config=model.config)
        accept_lengths: list[int] = []

        timer.start()
        proposer.bind(StepContext(self.temperature, self.generator, timer))
        proposer.start(prompt_ids)
        timer.lap("draft")
        logits = self.forward(model, seq[None, :n_prompt], cache=cache, logits_to_keep=1)
        root = self._pick(logits[0, -1])
        timer.lap("prefill")
        seq[n_prompt] = root
        length = n_prompt + 1  # committed tokens; the last one (the root) is not in the KV cache yet
        accept_lengths.append(1)
        done = bool(torch.isin(root, self.eos)) or max_new_tokens <= 1
        timer.lap("update")

        while not done:
            draft = proposer.propose(seq, length)
            timer.lap("draft")
            tree, prefix = draft.tree, length - 1
            if prefix + tree.size + 1 > self.max_context:
                raise RuntimeError(f"sequence would exceed the model context ({self.max_context} tokens)")
            inputs = torch.cat([seq[length - 1 : length], draft.tokens.to(device)])
            positions = (prefix + tree.depth.to(device)).unsqueeze(0)
            mask = None  # a chain's tree mask is the causal mask, which the model builds itself
            if not tree.is_chain:
                bias = tree.attention_bias(self.dtype, device)
                visible = torch.zeros(tree.size + 1, prefix, dtype=self.dtype, device=device)
                mask = torch.cat([visible, bias], dim=1)[None, None]
            timer.lap("preprocess")
            logits = self.forward(model, inputs[None], cache=cache, position_ids=positions, attention_mask=mask,
                                  tree=tree)[0]
            timer.lap("target_forward")
            target = logits.argmax(-1)
            if self.temperature == 0:
                acc = greedy_accept(tree, inputs[None], target[None], draft.candidates)
            else:
                p = target_probs(logits, self.temperature)
                timer.lap("sampling")
                slots, token = stochastic_accept(
                    tree, inputs, p, draft.probs, proposer.rule, self.generator, draft.candidates
                )
                acc = Acceptance.from_path(tree, slots, token)
            path = acc.slots().to(device)
            new = torch.cat([inputs[path[1:]], acc.bonus.to(device)])  # accepted drafts + bonus
            timer.lap("verify")

            room = n_prompt + max_new_tokens - length
            is_eos = torch.isin(new[:room], self.eos)
            n_new = min(len(new), room)
            if bool(is_eos.any()):
                n_new = int(is_eos.nonzero()[0]) + 1
                done = True
            seq[length : length + n_new] = new[:n_new]
            length += n_new
            accept_lengths.append(n_new)
            done = done or length - n_prompt >= max_new_tokens
            if not done:
                keep_accepted(cache, prefix, path)
            proposer.update(inputs, logits if proposer.wants_logits else None, target, acc)
            timer.lap("update")

        return Generation(seq[n_prompt:length].tolist(), accept_lengths, timer.result())
