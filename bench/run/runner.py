"""One run = model x dataset x method, measured with the Spec-Bench protocol (entry point: bench/run/__main__.py).

Protocol: `run.warmup` untimed passes of the first prompt (stateful methods keep what they learn, as in
Spec-Bench), then per prompt-turn a timed region of prefill + decode with device sync; tokenization is
outside. Each prompt-turn's output is compared with greedy AR (untimed, cached). Each record is checkpointed
as it is made (bench.run.checkpoint), so a killed run resumes; results/runs/<run_id>/ (bench.run.store) is
written only when the run completes.
"""

from __future__ import annotations

import itertools
import json
import random
import re
import sys
import time
import zlib
from datetime import datetime

import torch
from omegaconf import OmegaConf
from tqdm import tqdm

from bench import metrics
from bench.core.engine import Engine
from bench.core.graph_engine import GraphEngine, GraphModeRefused, sized_capacity
from bench.core.machine import cpu_name
from bench.core.proposer import Proposer, drafts_rows_at_once
from bench.core.timing import PhaseTimer, device_sync, phases_exact
from bench.errors import HarnessError
from bench.models.chat import answer_text, prompt_ids
from bench.models.loading import ModelBundle, load_model
from bench.paths import project_path
from bench.run import store
from bench.run.checkpoint import Checkpoint, config_key
from bench.run.grading import grade
from bench.run.provenance import provenance
from bench.run.reference import ReferenceStore
from bench.run.validate import check_method
from data.loaders import load_selection
from methods import build_method
from methods.ar import Autoregressive

_BUNDLES: dict = {}  # model bundles reused across the jobs of one multirun process


def get_bundle(model_cfg, model_cache: str = "data/cache/models") -> ModelBundle:
    """The model bundle of a model config, kept across the jobs of one multirun process (one model at a time)."""
    key = json.dumps(OmegaConf.to_container(model_cfg, resolve=True), sort_keys=True)
    if key not in _BUNDLES:
        _BUNDLES.clear()  # one model in memory at a time
        _BUNDLES[key] = load_model(model_cfg, str(project_path(model_cache)))
    return _BUNDLES[key]


def select_items(items: list[dict], run) -> list[dict]:
    """Limit first, then shuffle: a shuffled run measures the same questions in another order. `limit_per_group`
    takes N of each report group spread over its categories (the first of each category in turn), in file order:
    SpecBench's mt_bench group holds MT-Bench's 8 categories, whose first N questions alone are all "writing"."""
    if run.limit_per_group is not None:
        groups: dict[str, dict[str, list[int]]] = {}  # group -> category -> item positions, in file order
        for i, it in enumerate(items):
            groups.setdefault(it["group"], {}).setdefault(it.get("category"), []).append(i)
        keep = set()
        for categories in groups.values():
            turns = itertools.zip_longest(*categories.values())  # each category's first, then second, ...
            keep.update([i for turn in turns for i in turn if i is not None][: run.limit_per_group])
        items = [it for i, it in enumerate(items) if i in keep]
    if run.limit is not None:
        items = items[: run.limit]
    if run.shuffle:
        items = items[:]
        random.Random(run.seed).shuffle(items)
    return items


def run_id(cfg) -> str:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    variant = f"-{cfg.run.variant}" if cfg.run.variant else ""
    return f"{stamp}-{cfg.model.name}-{cfg.dataset.name}-{cfg.method.name}{variant}"


def reference_key(bundle: ModelBundle) -> str:
    """The greedy reference's file name: everything that can change greedy AR's tokens (model and its weights,
    dtype, device and its name, attention implementation, CPU linear backend)."""
    dev = bundle.device
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else cpu_name()
    attn = getattr(bundle.model.config, "_attn_implementation", None) or "default"
    parts = (bundle.name, str(bundle.dtype).replace("torch.", ""), dev.type, name, attn,
             bundle.linear_backend or "plain", *([bundle.weights] if bundle.weights else []))
    return re.sub(r"[^A-Za-z0-9._-]+", "_", "-".join(parts))


def where_text(n_ids: int, prompt: int, unanswered: int, max_new: int, where) -> str:
    """The prompt a context check names: its question and turn, and for a later turn what its length counts."""
    if unanswered:
        return (f"turn {where[1] + 1} of question {where[0]}: prompt of up to {prompt} tokens ({n_ids} of questions "
                f"and template, {unanswered} earlier answer(s) of up to {max_new} tokens)")
    return f"question {where[0]}: prompt of {n_ids} tokens" if where else f"prompt of {n_ids} tokens"


class Runner:
    def __init__(self, cfg, selection: tuple[list[dict], str] | None = None):
        """`selection`: load_selection's (items, description) of cfg.dataset where the caller loaded it already."""
        check_method(cfg)  # main() checked it already; other callers (engine_bench, scripts) get the same line
        self.cfg = cfg
        items, self.selection = selection or load_selection(
            cfg.dataset, str(project_path(cfg.paths.data_mirror)), str(project_path(cfg.paths.data_cache))
        )
        self.temperature = float(cfg.run.temperature)
        self.bundle = get_bundle(cfg.model, cfg.paths.model_cache)
        self.raw_tokens = cfg.dataset.get("raw_prompt_tokens")
        if self.raw_tokens:  # raw-text sets (DySpec/Sequoia): rows shorter than the prompt length are skipped
            kept = [it for it in items if len(self.raw_ids(it["turns"][0], full=True)) >= self.raw_tokens]
            if len(kept) < len(items):
                self.selection += f"; {len(items) - len(kept)} rows shorter than {self.raw_tokens} tokens skipped"
            items = kept
        self.dataset_items = items  # the whole set (a graph-mode cache sized to it serves any selection alike)
        self.items = select_items(items, cfg.run)
        if len(self.items) < len(items):  # the dataset's selection above, then this run's limits
            per_group = (f"{cfg.run.limit_per_group} of each group over its categories" if cfg.run.limit_per_group
                         else None)
            first = f"the first {cfg.run.limit}" if cfg.run.limit is not None else None
            self.selection += f"; run: {len(self.items)} of them ({', then '.join(filter(None, (per_group, first)))})"
        if not self.items:
            raise HarnessError(f"dataset '{cfg.dataset.name}' selection is empty")
        self.method = build_method(cfg.method, self.bundle)
        self.method.record_steps = bool(cfg.run.get("record_steps", False))  # Proposer.record_steps
        self.batch_size = int(cfg.run.batch_size)
        self.batches = 0  # generate calls so far: a batch's id in its records
        b = self.bundle
        # The AR reference is always the eager engine's; graph mode (run.graphs) decodes the method's outputs.
        self.eager = Engine(b.model, b.eos_token_ids, b.max_context, temperature=self.temperature, device=b.device)
        self.graphs = bool(cfg.run.get("graphs", False))
        mode = cfg.run.get("graph_compile")
        self.engine = GraphEngine(b.model, b.eos_token_ids, b.max_context, self.graph_capacity(),
                                  device=b.device, compile_with={"mode": mode} if mode else None
                                  ) if self.graphs else self.eager
        if self.graphs and isinstance(self.method, Proposer) and (why := self.engine.refusal(self.method)):
            raise HarnessError(why)  # before any prompt: what the config check cannot know until the method loads
        self.timer = PhaseTimer(b.device, sync=cfg.run.sync_phases)
        self.references = ReferenceStore(project_path(cfg.paths.results) / "cache" / "ar_reference",
                                         reference_key(b))
        # The reference is always greedy AR at batch 1 through this engine: such a run may write it; batched AR
        # (right padding, its own mask: in fp16/bf16 its rows can differ) is checked against it like any method.
        self.is_reference = (cfg.method.name == "ar" and self.temperature == 0 and self.batch_size == 1
                             and not self.graphs)
        self.check_context()

    @property
    def capacity(self) -> int | None:
        """Graph mode's static KV cache, in positions (None in eager mode)."""
        return self.engine.kv.capacity if self.graphs else None

    def graph_capacity(self) -> int:
        """Graph mode's static cache: run.graph_capacity, or for `auto` sized to the dataset's longest prompt (a later
        turn's counting max_new_tokens for each earlier answer) and its output (bench.core.graph_engine.sized_capacity).
        The whole dataset, not the selection: AR and the methods over it get one cache whatever each selected."""
        capacity, max_new = self.cfg.run.get("graph_capacity", "auto"), self.cfg.run.max_new_tokens
        if capacity != "auto":
            return int(capacity)
        longest = self.raw_tokens or max(len(self.prompt_of(history, question)) + t * max_new
                                         for it in self.dataset_items for t, history, question in self.turns_of(it))
        return sized_capacity(longest + max_new)

    def turns_of(self, item) -> list[tuple[int, list, str]]:
        """(t, the earlier questions with their answers left empty, the question) for each turn of `item` whose
        prompt is checked before the run (raw-text sets: the first only)."""
        turns = item["turns"] if not self.raw_tokens else item["turns"][:1]
        return [(t, [(q, "") for q in turns[:t]], question) for t, question in enumerate(turns)]

    def prompt_of(self, history, question) -> list[int]:
        """A prompt's ids: the raw text's first raw_prompt_tokens, or the question after `history` in the chat
        template."""
        if self.raw_tokens:
            return self.raw_ids(question)
        return prompt_ids(self.bundle.tokenizer, self.cfg.model.chat_template, history, question)

    def check_context(self) -> None:
        """Fail before anything is measured or written if any turn's prompt may not fit. A later turn's prompt
        holds the model's earlier answers, unknown yet: each is bounded by run.max_new_tokens, so turn t is checked
        at its questions in the chat template (answers left empty) plus t answers of max_new_tokens."""
        for item in self.items:
            for t, history, question in self.turns_of(item):
                self.encode(history, question, unanswered=t, where=(item["question_id"], t))

    def raw_ids(self, text: str, full: bool = False) -> list[int]:
        ids = self.bundle.tokenizer(text).input_ids
        return ids if full else ids[: self.raw_tokens]

    def encode(self, history, question, unanswered: int = 0, where=None) -> list[int]:
        """The prompt's ids; HarnessError if it cannot fit with its output. `unanswered` earlier answers missing from
        `history` count max_new_tokens each (check_context); `where` = (question id, turn) names the prompt."""
        ids = self.prompt_of(history, question)
        if ids and max(ids) >= self.bundle.vocab_size:  # e.g. a random-init shape with fewer tokens than the tokenizer
            raise HarnessError(f"prompt token id {max(ids)} is outside the {self.bundle.vocab_size}-token vocabulary "
                               f"of model '{self.bundle.name}': its tokenizer does not match it")
        # Room for the output and one draft beyond it (a static tree's size or a method's most draft nodes;
        # chains get a margin of 16).
        max_new = self.cfg.run.max_new_tokens
        draft_room = max(self.method.max_draft_tokens, 16)
        prompt = len(ids) + unanswered * max_new
        if self.graphs and prompt + max_new + draft_room > self.capacity:
            raise HarnessError(f"{where_text(len(ids), prompt, unanswered, max_new, where)} plus {max_new} new tokens "
                               f"and {draft_room} draft tokens exceeds graph mode's static KV cache of "
                               f"{self.capacity} positions (run.graph_capacity)")
        if prompt + max_new + draft_room > self.bundle.max_context:
            raise HarnessError(
                f"{where_text(len(ids), prompt, unanswered, max_new, where)} plus {max_new} new tokens and {draft_room} draft tokens exceeds the context of "
                f"{self.bundle.max_context} tokens of model '{self.bundle.name}'"
            )
        return ids

    def timed(self, prompts: list[list[int]], generators):
        """Wall time of one generate call over the prompts (a batch), synced at both ends; the method laps
        phases inside it."""
        max_new = self.cfg.run.max_new_tokens
        device_sync(self.bundle.device)
        t0 = time.perf_counter()
        try:
            gens = self.method.generate_batch(self.engine, prompts, max_new, self.timer, generators)
        except GraphModeRefused as err:  # what the config check cannot know (e.g. a proposer's own forward)
            raise HarnessError(str(err)) from err
        device_sync(self.bundle.device)
        return gens, time.perf_counter() - t0

    def reference(self, ids, output):
        if not self.cfg.run.check_lossless or self.temperature > 0:
            return None
        max_new = self.cfg.run.max_new_tokens
        ref = self.references.get(ids, max_new)
        # The grade (bench.run.grading) tells a half-precision near-tie from a wrong token; "equal" and
        # "first_divergence" stay for older readers, "dtype" because a float32 divergence is never excused.
        dtype = str(self.bundle.dtype).replace("torch.", "")
        if ref is None and self.is_reference:  # this output is batch-1 greedy AR: it becomes the reference
            self.references.put(ids, max_new, output)
            return {"equal": True, "reference": "self", **grade(None, ids, output, output), "dtype": dtype}
        if ref is None:
            quiet = PhaseTimer(self.bundle.device, sync=False)
            ref = self.eager.generate(Autoregressive(None, self.bundle), ids, max_new, quiet).output_ids
            self.references.put(ids, max_new, ref)
        graded = grade(self.bundle.model, ids, output, ref, device=self.bundle.device)  # a forward only if they differ
        return {"equal": graded["grade"] == "identical", "reference": "ar", **graded, "dtype": dtype}

    def seed(self, item, turn) -> int:
        # Per prompt-turn seed: a sampled output does not depend on which prompts ran before it.
        return zlib.crc32(f"{self.cfg.run.seed}-{item['question_id']}-{turn}".encode())

    def run_items(self, items, records=None, done=None, save=None):
        """All turns of a batch of questions (one at run.batch_size 1), turn by turn: turn t of every question
        that has one is decoded together. `done` maps (question_id, turn) to the records of a resumed run, whose
        turns are not run again (their outputs rebuild the conversation); `save` checkpoints each new record."""
        tok = self.bundle.tokenizer
        history: dict = {it["question_id"]: [] for it in items}
        for turn in range(max(len(it["turns"]) for it in items)):
            todo = []
            for it in items:
                if turn >= len(it["turns"]):
                    continue
                question = it["turns"][turn]
                if done and (it["question_id"], turn) in done:
                    out = done[it["question_id"], turn]["output_ids"]
                    history[it["question_id"]].append((question, answer_text(tok, out)))
                else:
                    todo.append((it, self.encode(history[it["question_id"]], question)))
            if not todo:
                continue
            self.engine.reseed(self.seed(todo[0][0], turn))
            generators = [self.engine.generator] if len(todo) == 1 else [
                torch.Generator(device=self.bundle.device).manual_seed(self.seed(it, turn)) for it, _ in todo]
            gens, wall = self.timed([ids for _, ids in todo], generators)
            self.batches += 1
            batch = None
            if self.batch_size > 1:  # the batch's timed region, once per batch (bench.metrics)
                batch = {"id": self.batches, "size": len(todo), "wall_time": wall,
                         "new_tokens": sum(len(g.output_ids) for g in gens),
                         "phase_times": gens[0].phase_times, "occupancy": gens[0].occupancy}
            for (it, ids), gen in zip(todo, gens, strict=True):
                history[it["question_id"]].append((it["turns"][turn],
                                                   answer_text(tok, gen.output_ids)))
                if records is None:
                    continue
                if sum(gen.accept_lengths) != len(gen.output_ids):
                    raise RuntimeError(f"{self.cfg.method.name}: accept lengths do not add up to the output length")
                records.append({
                    "question_id": it["question_id"],
                    "category": it["category"],
                    "group": it["group"],
                    "turn": turn,
                    "prompt_tokens": len(ids),
                    "new_tokens": len(gen.output_ids),
                    # At batch > 1: the row's latency; the batch's wall time is in `batch`.
                    "wall_time": wall if batch is None or gen.elapsed is None else gen.elapsed,
                    "steps": len(gen.accept_lengths),
                    "accept_lengths": gen.accept_lengths,
                    "draft_nodes": gen.draft_nodes,
                    "verified_nodes": gen.verified_nodes,
                    **({"counters": gen.counters} if gen.counters else {}),
                    "phase_times": gen.phase_times if batch is None else {},
                    "output_ids": gen.output_ids,
                    "lossless": self.reference(ids, gen.output_ids),
                    **({"batch": batch} if batch else {}),
                })
                if save:
                    save(records[-1], self.method.state_dict())

    def warm_up(self) -> None:
        """`run.warmup` untimed passes over the first batch (its records kept nowhere)."""
        for _ in range(self.cfg.run.warmup):
            self.run_items(self.items[: self.batch_size])

    def run(self, ckpt: Checkpoint | None = None) -> list[dict]:
        """Records of every prompt-turn; with a checkpoint, each is saved as it is made, and a resumed run
        starts after the last saved one with the proposer's saved state."""
        batches = [self.items[i : i + self.batch_size] for i in range(0, len(self.items), self.batch_size)]
        self.warm_up()
        records: list[dict] = []
        done: dict = {}
        if ckpt is not None and ckpt.resumed_at:
            # Warm-up taught a stateful method something; the saved state is what the killed run knew.
            self.method.load_state_dict(ckpt.proposer_state)
            records = list(ckpt.records)
            done = {(r["question_id"], r["turn"]): r for r in records}
            # new batches' ids follow the saved ones: metrics key a batch's timed region by its id, and this
            # process's warm-up counted from 0 again (a repeated id dropped a saved batch's wall time)
            self.batches = max([self.batches, *(r["batch"]["id"] for r in records if r.get("batch"))])
            print(f"resuming {ckpt.run_id} after {ckpt.resumed_at} prompt-turns", file=sys.stderr)
        desc = f"{self.cfg.method.name} on {self.cfg.dataset.name}"
        with tqdm(total=len(self.items), desc=desc, unit="q", file=sys.stderr) as bar:
            for batch in batches:
                self.run_items(batch, records, done, ckpt.save if ckpt else None)
                bar.update(len(batch))
        return records


def command_overrides() -> dict[str, str]:
    """This job's command-line/sweep overrides as {key: value} (a sweep's swept values), {} outside Hydra."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return {}
    pairs = (o.split("=", 1) for o in HydraConfig.get().overrides.task if "=" in o)
    return {k.lstrip("+~"): v for k, v in pairs}


def run_summary(cfg, runner: Runner, records: list[dict], ckpt: Checkpoint | None = None) -> dict:
    """The run's summary.json (metrics, speedups against the latest baselines, provenance); bench.run.store.write_run
    writes it with the records. With a checkpoint, the run keeps the id it was started under and says where it was
    resumed."""
    b = runner.bundle
    results = project_path(cfg.paths.results)
    rid = ckpt.run_id if ckpt else run_id(cfg)
    prov = provenance(b.device, b.dtype, b.linear_backend)
    if ckpt is not None and ckpt.resumes:  # every sitting a resumed run's records come from (paired_baseline)
        prov["boot_ids"] = ckpt.boots()  # this process's among them: its resume recorded it
    summary = {
        "run_id": rid,
        "config_key": config_key(cfg),
        "resumed": ckpt.resumes if ckpt else [],
        "created": datetime.now().isoformat(timespec="seconds"),
        "method": cfg.method.name,
        "variant": cfg.run.variant,
        "dataset": cfg.dataset.name,
        "model": cfg.model.name,
        "weights": b.weights,  # the same name over other weights is another model (identity.weights_id)
        "paper_size": cfg.model.get("paper_size"),
        "max_new_tokens": cfg.run.max_new_tokens,
        "batch_size": runner.batch_size,
        "graphs": runner.graphs,
        **({"graph_compile": cfg.run.graph_compile} if runner.graphs and cfg.run.get("graph_compile") else {}),
        **({"graph_capacity": runner.capacity} if runner.graphs else {}),  # its forwards attend over all of it
        # Phase times are exact per phase on a GPU only in the breakdown mode (device sync at each boundary).
        "sync_phases": bool(cfg.run.sync_phases),
        "temperature": runner.temperature,
        "selection": runner.selection,
        "experiment": cfg.run.get("experiment"),
        "overrides": command_overrides(),
        "machine": prov["machine"],
        "method_settings": runner.method.describe(),
        "draft_rows_at_once": drafts_rows_at_once(runner.method),  # absent: before 4b29af0, rows drafted alone
        "summary": metrics.summarize(records),
        "groups": metrics.by_group(records),
        "provenance": prov,
    }
    speedups = {}
    for base in ("hf_generate", "ar"):
        if summary["method"] == base and not summary.get("variant"):
            continue  # the run is that baseline: not a speedup over an older run of itself
        found = store.find_baseline(results, summary, base)
        if found:
            speedups[f"vs_{base}"] = {"value": metrics.speedup(records, found.records),
                                      "interval": metrics.speedup_interval(records, found.records),
                                      "aggregate": metrics.aggregate_speedup(records, found.records),
                                      "baseline_run": found.run_id}
    summary["speedup"] = speedups
    if not phases_exact(str(b.device), cfg.run.sync_phases):  # the reports' rule (bench/report/phase_timing.py):
        for m in (summary["summary"], *summary["groups"].values()):  # unsynced GPU phases time launches only,
            m.update(overhead_share=None, phase_share={})  # so no share is printed or logged (raw times stay)
    return summary
