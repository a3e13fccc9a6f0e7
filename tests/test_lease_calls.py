"""docs/gpu.md's next lease's calls, checked against scripts/gpu_session.sh and gpu-check's options: a call that a
typo or a stale option stops costs minutes of a 15-minute lease that no CPU run gives back."""

from __future__ import annotations

import re
import shlex

from bench.check import gpu_check
from bench.paths import project_path

SCRIPT = project_path("scripts/gpu_session.sh").read_text()
SLOWEST_START_S = 460  # the H100's, of a 900 s lease (docs/gpu.md)
LEASE_S = 900


def calls() -> list[tuple[int, int, str]]:
    """(number, timeout_s, command) of each numbered call in the section, in order."""
    page = project_path("docs/gpu.md").read_text()
    section = page[page.index("### The next lease's calls"):]
    section = section[:section.index("\n### ", 1)]
    out = []
    for item in re.split(r"\n(?=\d+\. )", section)[1:]:
        number = int(item.split(".", 1)[0])
        timeouts = re.findall(r"`timeout_s` (\d+)", item)
        commands = re.findall(r"```bash\n\s*(.+?)\n\s*```", item)
        assert len(timeouts) == 1 and len(commands) == 1, f"call {number}: one timeout_s and one command"
        out.append((number, int(timeouts[0]), commands[0].strip()))
    return out


def script_value(pattern: str) -> set[str]:
    return set(re.search(pattern + r"([a-z_,]+)", SCRIPT).group(1).split(","))


def test_the_calls_are_numbered_in_order():
    numbers = [n for n, _, _ in calls()]
    assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) >= 5


def test_each_call_runs_as_the_script_and_gpu_check_read_it():
    steps = script_value(r"\$\{STEPS:-")  # the default: every step
    check_parts = script_value(r"\nCHECK_PARTS=")
    tags = []
    for number, timeout, command in calls():
        words = shlex.split(command)
        env = dict(w.split("=", 1) for w in words if re.match(r"[A-Z_]+=", w))
        rest = [w for w in words if not re.match(r"[A-Z_]+=", w)]
        assert rest[0] == "scripts/gpu_session.sh", command
        for name in env:
            assert "${" + name in SCRIPT, f"call {number}: the script reads no {name}"
        if rest[1] == "part":
            assert timeout >= 30, command
            continue
        assert rest[1] == "run" and len(rest) == 3, command
        seconds = int(rest[2])
        assert timeout == seconds + 30, f"call {number}: timeout_s {timeout}, not its run {seconds} + 30"
        chosen = env["STEPS"].split(",")
        assert set(chosen) <= steps, command
        for step in chosen:
            if step in ("compiled", "graphs", "check"):
                cap = int(env.get(f"{step.upper()}_CAP", seconds))
                assert 20 <= cap <= seconds, f"call {number}: {step}'s cap {cap} against its run {seconds}"
        if "check" in chosen:
            args = gpu_check.parse(shlex.split(env["GPU_CHECK_ARGS"]))  # raises on an unknown part or method
            assert set(args.parts) <= check_parts, f"call {number}: {args.parts} outside the check step's parts"
            tags.append(args.only)
    assert len(tags) == len(set(tags)), f"two calls' partial files would share a name: {tags}"


def test_the_carry_and_the_first_run_fit_after_the_slowest_start():
    first_two = [timeout for number, timeout, _ in calls() if number <= 2]
    assert SLOWEST_START_S + sum(first_two) <= LEASE_S
