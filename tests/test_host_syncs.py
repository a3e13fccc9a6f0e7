"""Host waits per decode step, counted (bench.core.syncs) for every registered method and pinned to a budget.

On a GPU every read of a tensor's value and every blocking host-to-device copy stalls the host. The counter sees
both on a CPU; each method runs on a tiny random Llama (untrained draft, heads and EAGLE head: waits do not depend
on what is accepted, only on how many levels and tokens a step has) at T = 0 and 0.6, batch 1 and 4, and its waits
per row and step must stay within:
- 2 for every method (the engine's one read of what each row keeps; one more for a proposer that must read or
  send something once a step: REST sends its retrieved tree); 1 for the greedy methods that need no more (AR,
  Token Recycling, Medusa, BPD, HF generate), so that one added read a step fails;
- + 1 per accepted draft token with stochastic verification (T > 0: the walk reads which child it took per level);
- + 2 per draft forward for the draft-model methods (a step's draft levels: what a level's draws or argmax send
  back, and its tokens).
The HF baselines run transformers' own loop (not ours): their counts are pinned as measured, so a change shows.
Adding an `.item()` to the loop or to a proposer breaks the budget (tested).
"""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

import bench.core.engine as engine_module
from bench.core.engine import Engine
from bench.core.syncs import CudaSyncWarnings, HostSyncCounter
from bench.core.timing import PhaseTimer
from bench.errors import HarnessError
from bench.models.drafts import init_draft_from_target
from bench.models.eagle import EagleHead
from bench.models.eagle3 import init_eagle3
from bench.models.heads import MedusaHeads
from bench.paths import PROJECT
from methods import REGISTRY, build_method, method_class
from methods.rest.datastore import Datastore, tokenizer_fingerprint
from methods.shared.draft_proposer import DraftModelProposer
from methods.shared.trees import sequoia as sequoia_tree
from methods.token_recycling.proposer import TokenRecycling
from tests.conftest import compose_cfg, tiny_llama

V, NO_EOS, NEW = 64, 10_000, 10
_g = torch.Generator().manual_seed(5)
PROMPTS = [torch.randint(0, V, (n,), generator=_g).tolist() for n in (17, 9, 12, 5)]
PROMPTS[0] = [5, 6, 7, 8, 9] * 3  # repetition: lookup methods draft early
METHODS = {  # every registered method, small settings where the default tree is large
    "ar": (), "pld": (), "token_recycling": (), "medusa": (), "bpd": (), "eagle": (),
    "eagle2": ("method.total_tokens=12", "method.depth=4"), "propd": ("method.prune_layer=1", "method.prune_topk=8"),
    "eagle3": ("method.total_tokens=12", "method.depth=4"),  # untrained (the bundle's): waits need no head
    "lookahead": ("method.level=4", "method.window=3", "method.guess=3"), "rest": ("method.num_draft=12",),
    "sd": ("method.draft_length=4",), "specinfer": ("method.branches=2", "method.depth=3"),
    "sequoia": ("method.size=8",), "dyspec": ("method.budget=12",),
    "holistic": ("method.draft_length=4",), "ouroboros": ("method.gamma=4",), "ouroboros_g12": ("method.gamma=4",),
    "hf_generate": (), "hf_pld": (), "hf_assisted": (),
}
# Greedy methods that need only the engine's read: pinned at 1, so one more read a step fails. (hf_generate's loop is
# transformers': one read a step in 5.24, two in 5.17, the GPU images' version; it keeps the default budget.)
ONE_WAIT = ("ar", "token_recycling", "medusa", "bpd")
# Over budget today, each for a reason still to fix (strict: the case fails once the method is within budget, so
# the entry is then removed). The waits measured on the code of 2026-11 per row and step are in brackets.
OVER = {
    "eagle2": "at T > 0 only: one read a draft (the chosen tree's parents, for the host's Tree; was ~42), for which "
              "T > 0's budget leaves no room beside the verifier's reads: 3.3 a step at batch 1, 2.5 at 4 (budgets "
              "2.4, 2.3)",
    "eagle3": "at T > 0 only: EAGLE-2's dynamic tree (methods/shared/feature_head.py), hence eagle2's one read a "
              "draft: 3.0 a step at batch 1, 2.4 at 4 (budgets 2.4, 2.4)",
    "propd": "at batch 1: the engine's read and the pruned forward's one (the kept width is a shape) fill the "
             "budget; the dynamic tree's switches add a new tree's indices, its pruning plan and the hit rates (~0.4 "
             "a step over 9 steps, fewer as trees repeat): 2.4 a step at T = 0, 3.6 at 0.6 (budget 2.1)",
    "lookahead": "at T > 0 only: its tokens are sent each step (1) beside the engine's read (1) and the walk's "
                 "read at the level that rejects (1): 3 a step plus one per accepted token (budget 2 plus one)",
    "hf_pld": "transformers' own loop (not ours): its candidate search reads per step (~17)",
    "hf_assisted": "transformers' own loop (not ours) (~12)",
}


class Vocab:
    """The bundle's tokenizer as far as REST's store check needs one."""

    def get_vocab(self):
        return {str(i): i for i in range(V)}


def random_heads(model, n: int, seed: int) -> MedusaHeads:
    torch.manual_seed(seed)
    heads = MedusaHeads(model.config.hidden_size, model.config.vocab_size, n, lm_head=model.get_output_embeddings())
    for block in heads.blocks:
        torch.nn.init.normal_(block[0].linear.weight, std=0.5)
    return heads.eval()


@pytest.fixture(scope="module")
def bundle():
    # sdpa, as on a GPU by default: transformers 5.17 (the GPU images') builds eager attention's mask with a host
    # scalar copied to the device at every forward, a wait that is transformers' and not the loop's
    model = tiny_llama(V, "sdpa", max_positions=512)
    draft = init_draft_from_target(model, 1)
    heads, early = random_heads(model, 5, 1), random_heads(model, 1, 2)
    early.layers = [1]
    torch.manual_seed(0)
    eagle = EagleHead(model).eval()
    eagle3 = init_eagle3(model, torch.device("cpu"), torch.float32)
    return SimpleNamespace(name="tiny", model=model, device=torch.device("cpu"), dtype=torch.float32, vocab_size=V,
                           eos_token_ids=[NO_EOS], pad_token_id=0, max_context=512, tokenizer=Vocab(),
                           load_draft=lambda: draft, draft_cfg=OmegaConf.create({"id": "tiny-draft"}),
                           draft_label=lambda: "tiny-draft", load_heads=lambda: heads,
                           load_early_heads=lambda: early, load_eagle=lambda: eagle,
                           load_eagle3=lambda: eagle3)


@pytest.fixture(scope="module", autouse=True)
def stubs():
    """REST's store and Sequoia's acceptance vector, built here instead of read from the caches."""
    docs = [torch.randint(0, V, (40,), generator=torch.Generator().manual_seed(i)).tolist() for i in range(30)]
    docs.append(PROMPTS[0] * 2)
    store = Datastore.from_documents(docs, V, {"tokenizer_fingerprint": tokenizer_fingerprint(Vocab())})
    patch = pytest.MonkeyPatch()
    patch.setattr("methods.rest.proposer.open_store", lambda *a: store)
    patch.setattr(sequoia_tree, "load_or_measure_acceptance", lambda *a: np.array([0.6, 0.2, 0.1, 0.05] + [0.01] * 4))
    yield
    patch.undo()


def method_for(name: str, bundle):
    return build_method(compose_cfg(f"method={name}", *METHODS[name]).method, bundle)


def decode(method, engine, prompts, new):
    if len(prompts) == 1:
        engine.reseed(0)
        return [method.generate(engine, prompts[0], new, PhaseTimer(sync=False))]
    gens = [torch.Generator().manual_seed(i) for i in range(len(prompts))]
    return method.generate_batch(engine, prompts, new, PhaseTimer(sync=False), gens)


def waits(bundle, name: str, temperature: float, batch: int) -> dict:
    """Waits of the decode steps (a NEW-token generation less a prefill-only one) per row and step, with the
    steps' draft forwards and accepted drafts per row and step."""
    engine = Engine(bundle.model, [NO_EOS], 512, temperature=temperature)
    prompts = PROMPTS[:batch]
    method = method_for(name, bundle)
    decode(method, engine, prompts, 3)  # warm: static trees are sent to the device once
    counted = []
    for new in (1, NEW):
        with HostSyncCounter() as c:
            gens = decode(method, engine, prompts, new)
        counted.append(c)
    row_steps = sum(len(g.accept_lengths) - 1 for g in gens)
    assert row_steps >= batch * 3, "too few decode steps to measure"
    reads, transfers = counted[1].reads - counted[0].reads, counted[1].transfers - counted[0].transfers
    # every draft forward but each row's first (the draft's prefill of the prompt: its waits count, not its budget)
    draft_calls = sum(max(sum(g.counters.get("draft_calls", [])) - 1, 0) for g in gens)
    return {"waits": (sum(reads.values()) + sum(transfers.values())) / row_steps, "reads": reads,
            "transfers": transfers, "draft_forwards": draft_calls / row_steps,
            "accepted": sum(a - 1 for g in gens for a in g.accept_lengths[1:]) / row_steps, "rows": batch / row_steps}


def budget(name: str, temperature: float, counts: dict) -> float:
    allowed = 2.0
    if temperature > 0:  # + each row's last step, whose accepted drafts the token limit may have cut
        allowed += counts["accepted"] + counts["rows"]
    elif name in ONE_WAIT:
        allowed = 1.0
    if issubclass(method_class(name), DraftModelProposer):
        allowed += 2 * counts["draft_forwards"]
    return allowed


def within_budget(bundle, name: str, temperature: float, batch: int) -> bool:
    counts = waits(bundle, name, temperature, batch)
    print(name, temperature, batch, counts, budget(name, temperature, counts))
    return counts["waits"] <= budget(name, temperature, counts)


def test_every_registered_method_is_budgeted():
    configs = {OmegaConf.load(p).name for p in (PROJECT / "conf" / "method").glob("*.yaml")}
    assert set(METHODS) == set(REGISTRY) == configs


# Methods over budget at some settings only: (temperature, batch) of those.
OVER_ONLY = {"lookahead": {(0.6, 1), (0.6, 4)}, "propd": {(0.0, 1), (0.6, 1)},
             "eagle2": {(0.6, 1), (0.6, 4)}, "eagle3": {(0.6, 1), (0.6, 4)}}


def marks(name: str, temperature: float, batch: int) -> list:
    over = name in OVER and (name not in OVER_ONLY or (temperature, batch) in OVER_ONLY[name])
    return [pytest.mark.xfail(reason=OVER[name], strict=True)] if over else []


CASES = [pytest.param(n, t, b, marks=marks(n, t, b)) for n in METHODS for t in (0.0, 0.6) for b in (1, 4)]


@pytest.mark.parametrize("name,temperature,batch", CASES)
def test_waits_per_step_within_budget(bundle, name, temperature, batch):
    try:
        ok = within_budget(bundle, name, temperature, batch)
    except (HarnessError, NotImplementedError) as e:  # greedy-only methods at T > 0, HF's unbatched baselines
        if name not in OVER:
            pytest.skip(str(e))
        ok = False  # (keeps the strict xfail of a method over budget at the settings it runs)
    assert ok


@pytest.mark.parametrize("temperature", [0.0, 0.6])
def test_an_item_added_to_a_proposer_breaks_the_budget(bundle, monkeypatch, temperature):
    real = TokenRecycling.propose

    def with_item(self, seq, length):
        draft = real(self, seq, length)
        draft.tokens[0].item()  # the kind of read that slips into a proposer
        return draft

    assert within_budget(bundle, "token_recycling", temperature, 1)
    monkeypatch.setattr(TokenRecycling, "propose", with_item)
    assert not within_budget(bundle, "token_recycling", temperature, 1)


def test_an_item_added_to_the_loop_breaks_the_budget(bundle, monkeypatch):
    real = engine_module.greedy_accept

    def with_item(*args, **kwargs):
        acc = real(*args, **kwargs)
        acc.best[0].item(), acc.bonus[0].item()  # AR has 1 wait a step: one more read would still be within 2
        return acc

    assert within_budget(bundle, "ar", 0.0, 1)
    monkeypatch.setattr(engine_module, "greedy_accept", with_item)
    assert not within_budget(bundle, "ar", 0.0, 1)


def test_counter_sees_reads_and_transfers():
    t = torch.arange(5, device="cpu")  # made with a device: a device tensor
    with HostSyncCounter() as c:
        bool(t[0]), int(t[1]), t.tolist(), t[2].item(), t.nonzero(), t[t > 2], torch.equal(t, t)
        t.to(torch.float32), t.to("cpu")  # a cast, and a move of a device tensor: no copy from the host
        torch.tensor([1], device="cpu"), torch.tensor([1, 2]).to("cpu")  # Python data sent to the device
        host = torch.zeros(3)  # no device: made on the host
        int(host[0]), host.tolist(), host + 1  # host values: no wait
        t[[0, 1]], t[host.long()], t.copy_(torch.ones(5, dtype=torch.long)), t[:3] + host.long()
        t.cpu()
    assert c.reads == Counter(bool=1, int=1, tolist=1, item=1, nonzero=1, bool_index=1, equal=1)
    assert c.transfers == Counter(from_host=1, to=1, index=2, mixed=2, cpu=1)


def test_cuda_sync_warnings_count_torchs_own_reports(monkeypatch):
    """On CUDA, torch's sync debug mode warns at each synchronizing call; the counter turns it on, counts those
    warnings by source line and restores the mode (here torch.cuda's two mode functions stand in for a device)."""
    import warnings

    modes = []
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: 0)
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", modes.append)
    with CudaSyncWarnings("cuda:0") as cuda:
        for _ in range(3):
            warnings.warn("called a synchronizing CUDA operation", UserWarning)  # the same line, each time
        warnings.warn("something else", UserWarning)
    assert (cuda.total, modes) == (3, ["warn", 0])
    assert list(cuda.sites.values()) == [3] and next(iter(cuda.sites)).startswith("tests/test_host_syncs.py:")
    with CudaSyncWarnings("cpu") as off:  # no CUDA: nothing is turned on, nothing counted
        warnings.warn("called a synchronizing CUDA operation", UserWarning)
    assert off.total is None and modes == ["warn", 0]


def test_a_zero_dim_tensor_index_is_a_read():
    """`t[i]` with a 0-dim integer device tensor i: torch reads i's value (one wait a row a step on CUDA, seen by
    the first GPU lease in the engine's path lookup and in stochastic verification); index_select does not."""
    t = torch.arange(5, device="cpu")
    i = t[3]  # made before counting: a device tensor
    with HostSyncCounter() as c:
        t[i], t.index_select(0, t[3:4]), t[t[1:3]]
    assert c.reads == Counter(scalar_index=1) and not c.transfers
