"""Safe, time-bounded answer grading.

Completions are adversarial: nothing in them is executed, plain numbers are compared without any parser, and
every symbolic comparison (math-verify, a reasoning-gym `score_answer`) runs in a reusable worker process that
is killed and replaced when it overruns. math-verify's own timeout relies on SIGALRM, which fails off the
main thread, so it is disabled here and the worker's deadline takes its place; calls are thread-safe.

Run as a script (`python grading.py --worker`) this file is that worker; it then imports nothing from
pods_rl, so starting it is cheap.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import select
import subprocess
import sys
import threading
import time
import unicodedata
from decimal import Decimal
from typing import Any

MAX_ANSWER_CHARS = 500  # an extracted math answer longer than this scores 0 without being parsed
MAX_GYM_ANSWER_CHARS = 5000  # reasoning-gym answers can be boards or matrices, so they get more room
MAX_NESTING = 20  # deepest ({[ nesting a math answer may have
CALL_TIMEOUT_S = 1.0  # one comparison in the worker
STARTUP_TIMEOUT_S = 120.0  # starting the worker, or building a reasoning-gym dataset in it

logger = logging.getLogger(__name__)

_NUMBER_RE = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
_PLAIN_NUMBER_RE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)")
_THOUSANDS_RE = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d*)?")
_POWER_RE = re.compile(r"\^|\*\*")
_OPERAND_RE = re.compile(r"[-+]?(?:\\[A-Za-z]+|[\w.]+|.)", re.DOTALL)
_HUGE_EXPONENT_RE = re.compile(r"(?:\^|\*\*)\s*[{(]?\s*[-+]?\d{7,}")
_HUGE_FACTORIAL_RE = re.compile(r"\d{4,}\s*!")
_LATEX_COMMAND_RE = re.compile(r"\\[A-Za-z]+")

# Functions an answer may call when a reasoning-gym scorer hands it to Python's eval or sympy's parse_expr.
_MATH_FUNCTIONS = frozenset(
    {
        *("sin", "cos", "tan", "cot", "sec", "csc", "asin", "acos", "atan", "acot"),
        *("sinh", "cosh", "tanh", "asinh", "acosh", "atanh"),
        *("exp", "log", "ln", "sqrt", "cbrt", "Abs", "abs", "factorial", "binomial", "floor", "ceiling"),
    }
)


def extract_answer(text: str) -> str | None:
    """The model's final answer: the last <answer> block, else the last \\boxed{}, else the last number."""
    end = text.rfind("</answer>")
    if end != -1:
        start = text.rfind("<answer>", 0, end)
        if start != -1 and (inner := text[start + len("<answer>") : end].strip()):
            return inner
    if (boxed := last_boxed(text)) is not None:
        return boxed
    numbers = _NUMBER_RE.findall(text)
    return numbers[-1] if numbers else None


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} (or \\fbox{...}, or `\\boxed 5`), braces balanced; None if absent."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start == -1:
        return None
    i = start + (len("\\boxed") if text.startswith("\\boxed", start) else len("\\fbox"))
    if i < len(text) and text[i] == "{":
        close = _matching_close(text, i)
        return text[i + 1 : close].strip() if close < len(text) else None
    token = re.match(r"\s+([^\s$]+)", text[i : i + MAX_ANSWER_CHARS])
    return token.group(1) if token else None


def grade(predicted: str, gold: str) -> bool:
    """Whether `predicted` equals `gold` mathematically (3/4 == 0.75 == \\frac{3}{4}); False if in doubt."""
    pred, gold = predicted.strip(), gold.strip()
    if not pred or not gold or len(pred) > MAX_ANSWER_CHARS:
        return False
    pred_number, gold_number = _as_number(pred), _as_number(gold)
    if pred_number is not None and gold_number is not None:
        return pred_number == gold_number
    if _squash(pred) == _squash(gold):
        return True
    if not _is_tame(pred):
        return False
    return _WORKER.call({"op": "verify", "pred": pred, "gold": gold}, CALL_TIMEOUT_S) is True


def score_reasoning_gym(dataset: str, config: dict[str, Any], entry_json: str, answer: str | None) -> float:
    """The dataset's own `score_answer(answer, entry)` in [0, 1], computed in the worker; 0.0 when unsafe.

    Several reasoning-gym scorers pass the answer to Python's `eval` or sympy's `parse_expr`, so an answer
    that could call anything is refused unless it is exactly the oracle answer.
    """
    entry = json.loads(entry_json)
    if answer is not None:
        if len(answer) > MAX_GYM_ANSWER_CHARS:
            return 0.0
        if answer != entry.get("answer") and not is_safe_for_eval(answer):
            return 0.0
    key = json.dumps([dataset, config], sort_keys=True)
    score = _WORKER.call({"op": "gym", "key": key, "entry": entry, "answer": answer}, CALL_TIMEOUT_S, prepare_key=key)
    return min(max(float(score), 0.0), 1.0) if isinstance(score, (int, float)) else 0.0


def is_safe_for_eval(text: str) -> bool:
    """Whether Python's eval of `text` could only compute, never call out: no dunders, no calls except math.

    Conservative: it looks at every "(" that would be a call (after a name, a closing bracket or a string)
    and allows only the math functions above, never as an attribute. Identifiers are NFKC-normalised the way
    Python normalises them, and comments and line continuations cannot hide a call.
    """
    s = unicodedata.normalize("NFKC", text)
    if "__" in s or ("#" in s and "(" in s):
        return False
    for i, char in enumerate(s):
        if char != "(":
            continue
        j = _skip_back_blank(s, i - 1)
        if j < 0:
            continue
        if s[j] in ")]}'\"":
            return False
        if s[j].isalnum() or s[j] == "_":
            k = j
            while k >= 0 and (s[k].isalnum() or s[k] == "_"):
                k -= 1
            if s[k + 1 : j + 1] not in _MATH_FUNCTIONS:
                return False
            before = _skip_back_blank(s, k)
            if before >= 0 and s[before] == ".":
                return False
    return True


def _skip_back_blank(s: str, j: int) -> int:
    while j >= 0 and (s[j].isspace() or s[j] == "\\"):
        j -= 1
    return j


def _as_number(text: str) -> Decimal | None:
    """`text` as an exact number if it is a plain one ("$1,234.50", "42."), else None."""
    s = text.replace("\\$", "").replace("$", "").replace(" ", "").rstrip(".")
    if _THOUSANDS_RE.fullmatch(s):
        s = s.replace(",", "")
    return Decimal(s) if _PLAIN_NUMBER_RE.fullmatch(s) else None


def _squash(text: str) -> str:
    return "".join(text.replace("$", "").split())


def _matching_close(text: str, open_at: int) -> int:
    """Index of the bracket closing the one at `open_at` (escaped \\{ \\} skipped), or len(text)."""
    pairs = {"{": "}", "(": ")"}
    opener, closer = text[open_at], pairs[text[open_at]]
    depth, i = 0, open_at
    while i < len(text):
        char = text[i]
        if char == "\\":
            i += 2
            continue
        if char == opener:
            depth += 1
        elif char == closer:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return len(text)


def _is_tame(text: str) -> bool:
    """Cheap screen for answers that would make sympy hang: deep nesting, power towers, huge exponents."""
    depth = 0
    for char in text:
        if char in "{([":
            depth += 1
            if depth > MAX_NESTING:
                return False
        elif char in "})]":
            depth = max(depth - 1, 0)
    if _HUGE_EXPONENT_RE.search(text) or _HUGE_FACTORIAL_RE.search(text):
        return False
    height = _power_height(text)
    has_variable = re.search(r"[A-Za-z]", _LATEX_COMMAND_RE.sub("", text)) is not None
    return height < 3 and (height < 2 or has_variable)


def _power_height(text: str) -> int:
    """Height of the tallest power tower: 2 for x^2, 2 for 9^{9^9} and 10^10^10, 3 for 9^{9^{9^9}}..."""
    height, i = 0, 0
    while (found := _POWER_RE.search(text, i)) is not None:
        tower, i = 0, found.start()
        while (op := _POWER_RE.match(text, i)) is not None:  # a^b^c stacks like a^{b^c}
            operand, i = _exponent_operand(text, op.end())
            tower += 1 + _power_height(operand)
            while i < len(text) and text[i].isspace():
                i += 1
        height = max(height, tower)
    return height


def _exponent_operand(text: str, i: int) -> tuple[str, int]:
    """The exponent starting at `i` (a {...} or (...) group, or one token) and the index after it."""
    while i < len(text) and text[i].isspace():
        i += 1
    if i < len(text) and text[i] in "{(":
        close = _matching_close(text, i)
        return text[i + 1 : close], close + 1
    token = _OPERAND_RE.match(text, i)
    return (token.group(0), token.end()) if token else ("", i)


class _WorkerFailed(Exception):
    pass


class _Worker:
    """One grading subprocess, used under a lock; killed and replaced when a call overruns or it dies."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._owner_pid = 0
        self._buffer = b""
        self._ready = False
        self._prepared: set[str] = set()

    def call(self, request: dict[str, Any], timeout_s: float, prepare_key: str | None = None) -> Any:
        """The worker's answer to `request`, or None on error, timeout or a dead worker."""
        with self._lock:
            try:
                self._ensure_ready()
                if prepare_key is not None and prepare_key not in self._prepared:
                    self._exchange({"op": "prepare", "key": prepare_key}, STARTUP_TIMEOUT_S)
                    self._prepared.add(prepare_key)
                return self._exchange(request, timeout_s)
            except _WorkerFailed:
                return None
            except (OSError, TimeoutError, ValueError) as error:
                logger.warning("grading worker replaced (%s); the answer scores 0", error)
                self._restart()
                return None

    def _ensure_ready(self) -> None:
        # A forked child shares its parent's pipes: it needs a worker of its own.
        if self._proc is None or self._owner_pid != os.getpid() or self._proc.poll() is not None:
            self._start()
        if not self._ready:
            self._read(STARTUP_TIMEOUT_S)
            self._ready = True

    def _exchange(self, request: dict[str, Any], timeout_s: float) -> Any:
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write(json.dumps(request).encode() + b"\n")
        self._proc.stdin.flush()
        reply = self._read(timeout_s)
        if "error" in reply:
            raise _WorkerFailed(reply["error"])
        return reply["ok"]

    def _read(self, timeout_s: float) -> dict[str, Any]:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise TimeoutError("grading worker overran its deadline")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise OSError("grading worker exited")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def _start(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self._owner_pid = os.getpid()
        self._buffer, self._ready, self._prepared = b"", False, set()

    def _restart(self) -> None:
        """Kill the worker and start its replacement now, so it warms up before the next call."""
        self.close()
        self._start()

    def close(self) -> None:
        if self._proc is not None and self._owner_pid == os.getpid():
            self._proc.kill()
            self._proc.wait()
            for pipe in (self._proc.stdin, self._proc.stdout):
                if pipe is not None:
                    pipe.close()
        self._proc = None


_WORKER = _Worker()
atexit.register(_WORKER.close)


def _worker_main() -> None:
    """Serve JSON-line requests on stdin; stray prints from libraries go to stderr, not into the replies."""
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    from math_verify import parse, verify

    def same(pred: str, gold: str) -> bool:
        gold_parsed = parse(_boxed(gold), parsing_timeout=None) or parse(gold, parsing_timeout=None)
        for candidate in dict.fromkeys((pred, _boxed(pred))):
            parsed = parse(candidate, parsing_timeout=None)
            if gold_parsed and parsed and verify(gold_parsed, parsed, timeout_seconds=None):
                return True
        return False

    gym_datasets: dict[str, Any] = {}

    def handle(request: dict[str, Any]) -> Any:
        if request["op"] == "verify":
            return same(request["pred"], request["gold"])
        if request["op"] == "prepare":
            import reasoning_gym

            name, config = json.loads(request["key"])
            gym_datasets[request["key"]] = reasoning_gym.create_dataset(name, **config)
            return True
        return float(gym_datasets[request["key"]].score_answer(request["answer"], request["entry"]))

    replies.write(json.dumps({"ok": "ready"}) + "\n")
    for line in sys.stdin:
        try:
            reply = {"ok": handle(json.loads(line))}
        except Exception as error:  # a bad answer must never take the worker down
            reply = {"error": repr(error)[:300]}
        replies.write(json.dumps(reply) + "\n")


def _boxed(text: str) -> str:
    return text if "\\boxed" in text else "\\boxed{" + text + "}"


if __name__ == "__main__" and sys.argv[1:] == ["--worker"]:
    _worker_main()
