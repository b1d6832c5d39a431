"""Continuous batching: one scheduler thread owns the model and a KV cache of
``parallel`` slots (plus one scratch slot for moving sequences).

Each iteration of the scheduler
  1. drops the requests whose client went away (their slot is free at once);
  2. admits the next queued request when a slot is free (and no prompt is being read):
     the slot is the free one
     whose kept tokens share the longest prefix with the prompt, and that prefix is
     copied from whichever slot holds the longest one (a chat's next turn continues
     from its previous turn's keys and values; ``n`` choices share their prompt);
  3. reads up to ``prefill_chunk`` prompt tokens: a chunk of the prompt being
     prefilled, and while tokens of that budget remain the next queued prompts (admitted
     as in 2), so a long prompt delays the running requests by one chunk per step, not
     by its whole prefill, and many short prompts arriving together join the batch in
     one step; when a prompt is done its first token is sampled;
  4. runs one decode step for every request past its prompt, all rows in one forward
     call (they are kept in slots 0 .. n-1: a finished request's slot is swapped
     behind them, its keys and values kept for reuse).

The promise: a request's tokens are the same bits whatever else is in the batch. A
row's logits are the bits it gets alone (bc_gpt_forward's promise), a prompt
prefilled in chunks or continued from a copied prefix gets the bits it gets in one
piece (tests/test_cache_ops.py), and every choice samples from its own generator
(:mod:`blockc.serve.sampling`). tests/test_serve.py checks it against solo runs.
A longrope model's (Phi-3) sequence past the original length has every position turned by
the long factors, as transformers turns it: such a prompt's first call reaches past that
length, a slot's keys serve only prompts on their side of it, and a decoding row reaching
it + 1 runs whole again (tests/test_serve_longrope.py).

A failure is its request's alone: an exception in a prompt's forward, a choice's
sampler or its text ends that job with ``"error"`` (its slot emptied and freed) while
the others run on; a decode forward that fails ends the rows it held, not the queue
(tests/test_serve_faults.py injects a failure at each stage).
"""
from __future__ import annotations

import collections
import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence

import numpy as np

from .drafting import DEFAULT_DRAFT_MAX, DraftSlots
from .metrics import Latencies
from .sampling import RowSampler

__all__ = ["Engine", "Job", "QueueFull", "Draining", "TextTail"]


class QueueFull(Exception):
    """The queue holds ``max_queue`` requests already."""


class Draining(Exception):
    """The engine is shutting down: it finishes what it has and takes nothing new."""


class TextTail:
    """The text of a growing list of ids, released piece by piece: never a character cut
    between tokens, never the start of a stop string that may still complete (held
    back until it cannot), nothing from a stop string on.

    A stop string is looked for in the text whose characters are complete (a token
    that ends inside a multi-byte character completes the stop string before it all
    the same) and, by :meth:`flush`, in the whole text at the end: whichever way the
    request ends, a stop string never reaches the client, and ``stopped`` tells the
    end's reason ("stop").

    The text is decoded incrementally: the ids whose text ended on a whole character
    are settled, and each new token decodes only a window from the previous settling
    point on (its tokens before the last settling point give the decoder its context: a
    leading space, a word joined to the one before) and appends what the window's text
    adds past the text of its context; when the window's text does not begin with that
    (a decoder that rewrote its context) the whole list is decoded, as it always was."""

    def __init__(self, decode: Callable[[List[int]], str], stops: Sequence[str]):
        self._decode, self.stops = decode, list(stops)
        self._longest = max((len(s) for s in self.stops), default=0)
        self.ids: List[int] = []
        self.text, self.sent, self.stopped = "", 0, False
        # the incremental decoding: ids[:_read] settled (their text _settled), the
        # window from _start (its context ids[_start:_read], whose text is _context)
        self._start = self._read = 0
        self._settled = self._context = ""
        self._context_of = (0, 0)

    def _whole(self) -> str:
        """The text of all the ids (as ``decode(ids)``), a small window decoded."""
        n = len(self.ids)
        if (self._start, self._read) != self._context_of:
            # the context must decode to something: a context of skipped special tokens
            # alone would let the decoder take the new text for the sequence's start
            while True:
                self._context = self._decode(self.ids[self._start:self._read])
                if self._context or self._start == 0:
                    break
                self._start -= 1
            self._context_of = (self._start, self._read)
        window = self._decode(self.ids[self._start:])
        if window.startswith(self._context):
            text = self._settled + window[len(self._context):]
        else:
            text = self._decode(self.ids)
        if not text.endswith("\ufffd"):  # whole characters: settled, the window moves on
            self._settled = text
            self._start, self._read = self._read, n
        return text

    def _cut(self, text: str) -> bool:
        """Look for a stop string in text (from where one could still start); on a hit
        keep the text before it and mark the tail stopped."""
        start = max(0, self.sent - self._longest)
        hits = [i for i in (text.find(s, start) for s in self.stops) if i >= 0]
        if not hits:
            return False
        self.text, self.stopped = text[:max(min(hits), self.sent)], True
        return True

    def push(self, token: int):
        """(the new text to send, True when a stop string completed)."""
        self.ids.append(token)
        text = self._whole()
        complete = text.rstrip("\ufffd")  # a character still incomplete: held back
        if self.stops and self._cut(complete):
            piece, self.sent = self.text[self.sent:], len(self.text)
            return piece, True
        if len(complete) < len(text):
            return "", False
        self.text = text
        end = len(text)
        if self.stops:
            hold = 0
            for s in self.stops:
                for k in range(min(len(s) - 1, len(text)), hold, -1):
                    if text.endswith(s[:k]):
                        hold = k
                        break
            end = max(self.sent, len(text) - hold)
        piece, self.sent = text[self.sent:end], end
        return piece, False

    def flush(self) -> str:
        """What is held back (a character left incomplete at the end included, a stop
        string the whole text completes cut off: ``stopped`` then True)."""
        if not self.stopped and self.ids:
            text = self._whole() if self._read < len(self.ids) else self._settled
            if not (self.stops and self._cut(text)):
                self.text = text
        piece, self.sent = self.text[self.sent:], len(self.text)
        return piece


@dataclass(eq=False)
class Job:
    """One choice of one request, as the scheduler runs it. ``emit(event)`` is called
    from the scheduler thread with ``("token", piece, token, logprob, top)`` for each
    token shown (the end token is counted, not shown) and ``("end", finish_reason,
    usage_dict, tail)`` once, ``tail`` the text held back until the end (finish_reason
    None when cancelled, ``"error"`` with the message in usage_dict["error"] on a
    failure)."""
    prompt: np.ndarray
    max_tokens: int
    sampler: RowSampler
    text: TextTail
    end_ids: frozenset
    emit: Callable[[tuple], None]
    index: int = 0
    cancelled: bool = False
    # scheduler state
    out: List[int] = field(default_factory=list)
    last: int = -1
    pos: int = 0          # prompt tokens in the cache (prefill progress)
    reused: int = 0       # prompt tokens taken from the cache instead of computed
    t_submit: float = 0.0
    t_admit: Optional[float] = None
    t_first: Optional[float] = None

    def cancel(self) -> None:
        """Ask the scheduler to drop this job (a client gone): its slot is freed at the
        scheduler's next iteration, within one step."""
        self.cancelled = True


def _describe(e: BaseException) -> str:
    """An exception as one line for the client: its class and message."""
    msg = str(e).strip()
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


class _Slot:
    __slots__ = ("tokens", "job", "used", "long")

    def __init__(self):
        self.tokens: List[int] = []  # the ids whose keys and values the slot holds
        self.job: Optional[Job] = None
        self.used = 0
        self.long = False  # longrope: its keys turned by the long factors


def _common_prefix(a: List[int], b: np.ndarray, cap: int) -> int:
    n = min(len(a), len(b), cap)
    if n == 0:
        return 0
    eq = np.asarray(a[:n], dtype=np.int64) == b[:n]
    bad = np.flatnonzero(~eq)
    return int(bad[0]) if bad.size else n


class Engine:
    """The model, its batch cache and the scheduler thread.

    Parameters
    ----------
    model : blockc.GPT
    parallel : int
        Slots: requests decoded together.
    capacity : int
        Positions per slot (prompt + completion).
    max_queue : int
        Requests waiting for a slot before :meth:`submit` raises :class:`QueueFull`.
    prefill_chunk : int
        Prompt tokens per scheduler step.
    prefix_reuse : bool
        Continue a prompt from the longest prefix a slot still holds.
    cache_dtype : {"float32", "float16", "q8_0", "q4_0"}
        The slots' KV cache (:meth:`blockc.GPT.new_cache`).
    draft : blockc.GPT, optional
        Speculative decoding with this draft model (:mod:`blockc.serve.drafting`): the
        same tokens as without it, fewer target steps when it guesses them.
    draft_max : int, optional
        Tokens drafted per round (default :data:`~blockc.serve.drafting.DEFAULT_DRAFT_MAX`).
    """

    def __init__(self, model: Any, parallel: int = 4, capacity: int = 1024, max_queue: int = 64,
                 prefill_chunk: int = 128, prefix_reuse: bool = True,
                 cache_dtype: str = "float32", draft: Any = None,
                 draft_max: Optional[int] = None):
        self.model = model
        self.parallel, self.capacity = int(parallel), int(capacity)
        self.max_queue, self.chunk = int(max_queue), int(prefill_chunk)
        self.prefix_reuse = bool(prefix_reuse)
        self.vocab = model.config.vocab
        self.cache = model.new_cache(self.parallel + 1, self.capacity, cache_dtype)
        self._scratch = self.parallel
        self.drafter = (None if draft is None else
                        DraftSlots(draft, self.parallel + 1, self.capacity, self.vocab,
                                   draft_max or DEFAULT_DRAFT_MAX, cache_dtype, model))
        self._slots = [_Slot() for _ in range(self.parallel)]
        # longrope (Phi-3): a sequence longer than this turns every position by the long
        # factors (0: not a longrope model)
        self._long_at = model.config.rope_tables.long_after
        self._n_dec = 0
        self._pf: Optional[Job] = None
        self._pf_slot = -1
        self._waiting: Deque[Job] = collections.deque()
        self._cond = threading.Condition()
        self._clock = itertools.count(1)
        self._stop = False
        self.draining = False
        self.stats: Dict[str, float] = collections.defaultdict(float)
        self.latency = Latencies()  # histograms: queue wait, first token, per token
        # called after every scheduler step (:meth:`add_step_listener`): the events the
        # step emitted go out together
        self._listeners: List[Callable[[], None]] = []
        self._thread = threading.Thread(target=self._run, name="blockc-scheduler", daemon=True)
        self._thread.start()

    # ---- the public side (any thread) -------------------------------------------------

    def submit(self, jobs: Sequence[Job]) -> None:
        """Queue the jobs of one request (all or none).

        Raises
        ------
        QueueFull
            The queue has no room for them.
        Draining
            The engine is shutting down.
        """
        with self._cond:
            if self.draining or self._stop:
                raise Draining()
            if len(self._waiting) + len(jobs) > self.max_queue:
                raise QueueFull()
            now = time.monotonic()
            for j in jobs:
                j.t_submit = now
                self._waiting.append(j)
            self.stats["requests_total"] += 1
            self._cond.notify()

    @property
    def queue_depth(self) -> int:
        return len(self._waiting)

    @property
    def active(self) -> int:
        return self._n_dec + (self._pf is not None)

    def add_step_listener(self, fn: Callable[[], None]) -> None:
        """Call fn (on the scheduler thread) after every step, once the step's events
        are emitted: a relay that holds the events for another thread sends them on
        together (one wake-up per step, not one per token). Added once however often
        it is given."""
        with self._cond:
            if fn not in self._listeners:
                self._listeners.append(fn)

    def _stepped(self) -> None:
        for fn in list(self._listeners):
            try:
                fn()
            except Exception:  # a listener's loop gone: nothing to tell it
                pass

    def idle(self) -> bool:
        with self._cond:
            return not self._waiting and self._pf is None and self._n_dec == 0

    def wake(self) -> None:
        with self._cond:
            self._cond.notify()

    def drain(self, timeout: Optional[float] = None) -> bool:
        """Take nothing new; wait until every queued and running job is done. True when
        idle within ``timeout``."""
        with self._cond:
            self.draining = True
        end = None if timeout is None else time.monotonic() + timeout
        while not self.idle():
            if end is not None and time.monotonic() > end:
                return False
            time.sleep(0.02)
        return True

    def close(self) -> None:
        """Stop the scheduler thread (jobs still running end with finish_reason None)."""
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(timeout=10)

    # ---- the scheduler thread ---------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while (not self._stop and not self._waiting and self._pf is None
                       and self._n_dec == 0):
                    self._cond.wait()
                if self._stop:
                    break
            try:
                self._step()
            except Exception as e:  # a failure of the scheduler's own (a request's own
                # failures end that request alone): the jobs in the slots end with it, the
                # cache is emptied, the queue waits on
                self._fail_all(_describe(e), queued=False)
            finally:
                self._stepped()
        self._fail_all(None)
        self._stepped()

    def _fail_all(self, message: Optional[str], queued: bool = True) -> None:
        jobs = [s.job for s in self._slots if s.job is not None]
        if queued:
            with self._cond:
                jobs += list(self._waiting)
                self._waiting.clear()
        for j in jobs:
            self._end(j, "error" if message else None, error=message)
        for s in self._slots:
            s.job, s.tokens = None, []
        self.cache.reset()
        if self.drafter is not None:
            self.drafter.reset()
        self._n_dec, self._pf, self._pf_slot = 0, None, -1

    def _step(self) -> None:
        self._drop_cancelled()
        # prompts are read up to prefill_chunk tokens a step: several short ones join the
        # batch in one step (16 requests arriving at once decode together from the
        # second step, not the sixteenth); a long one's rest waits for the next step
        budget = self.chunk
        while budget > 0:
            if self._pf is None:
                self._admit()
            if self._pf is None:
                break
            budget -= self._prefill_chunk(budget)
            if self._pf is not None:  # its prompt goes on next step (or it failed)
                break
        if self._n_dec:
            self._decode()

    def _drop_cancelled(self) -> None:
        with self._cond:
            gone = [j for j in self._waiting if j.cancelled]
            for j in gone:
                self._waiting.remove(j)
        for j in gone:
            self._end(j, None)
        if self._pf is not None and self._pf.cancelled:
            self._release(self._pf_slot)
        for i in reversed(range(self._n_dec)):
            j = self._slots[i].job
            if j is not None and j.cancelled:
                self._release(i)

    def _free_slots(self) -> List[int]:
        return [i for i in range(self._n_dec, self.parallel)
                if i != self._pf_slot and self._slots[i].job is None]

    def _admit(self) -> None:
        free = self._free_slots()
        if not free:
            return
        with self._cond:
            if not self._waiting:
                return
            job = self._waiting.popleft()
        job.t_admit = time.monotonic()
        self.latency.observe("queue_wait", job.t_admit - job.t_submit)
        cap = len(job.prompt) - 1  # the last prompt token is always computed (its logits)
        target, keep = min(free, key=lambda i: self._slots[i].used), 0
        src, best = -1, 0
        # longrope: a slot's keys serve only a prompt on their side of the original length
        want = bool(self._long_at) and len(job.prompt) > self._long_at
        if self.prefix_reuse:
            scores = [(_common_prefix(self._slots[i].tokens, job.prompt, cap)
                       if self._slots[i].long == want else 0, i)
                      for i in range(self.parallel)]
            own = [(n, -self._slots[i].used, i) for n, i in scores if i in free]
            keep, _, target = max(own)
            best, src = max(scores)
            # a sliding window's ring may no longer hold what a shorter prefix reads
            keep = keep if self.cache.holds(target, keep) else 0
            best = best if self.cache.holds(src, best) else 0
        slot = self._slots[target]
        if best > keep:
            self.cache.copy_prefix(target, src, best)
            slot.tokens = list(self._slots[src].tokens[:best])
            slot.long = self._slots[src].long
            keep = best
        else:
            self.cache.truncate(target, keep)
            del slot.tokens[keep:]
        if keep == 0:
            slot.long = False
        slot.job, slot.used = job, next(self._clock)
        job.pos = job.reused = keep
        self._pf, self._pf_slot = job, target
        self.stats["prompt_tokens_cached"] += keep

    def _prefill_chunk(self, limit: int) -> int:
        """Read up to ``limit`` more tokens of the prompt being prefilled; the tokens read
        (``limit`` when its forward failed: the step's budget is spent)."""
        job, i = self._pf, self._pf_slot
        slot = self._slots[i]
        end = min(len(job.prompt), job.pos + limit)
        if self._long_at and end <= self._long_at < len(job.prompt):
            # longrope: a prompt longer than the original length has every position turned
            # by the long factors (transformers' forward of it), so its first call already
            # reaches past the original length (a call's length picks the factors)
            end = self._long_at + 1
        ids = job.prompt[job.pos:end]
        try:
            logits = self.model(ids[None], cache=self.cache.view(i, i + 1), last_only=True)
        except Exception as e:  # this prompt's forward: this job alone fails
            self._fail(i, e)
            return limit
        slot.tokens.extend(int(t) for t in ids)
        slot.long = slot.long or (bool(self._long_at) and end > self._long_at)
        self.stats["prompt_tokens"] += len(ids)
        job.pos = end
        if end < len(job.prompt):
            return len(ids)
        self._pf, self._pf_slot = None, -1
        if self._sample(job, logits[0, 0], slot):
            self._release(i)
            return len(ids)
        self._swap(i, self._n_dec)
        self._n_dec += 1
        return len(ids)

    def _decode(self) -> None:
        n = self._n_dec
        jobs = [self._slots[i].job for i in range(n)]
        # a draft: k tokens each row can still take (its room in the cache too)
        k = 0 if self.drafter is None else min(
            [self.drafter.k] + [j.max_tokens - len(j.out) for j in jobs])
        # longrope: a row still short-turned drafts no further than the original length
        # (each position's logits as its own length turns them); a row reaching original + 1
        # runs whole again, as transformers' Phi-3 generate recomputes its cache then
        cross = []
        if self._long_at:
            for i in range(n):
                s = self._slots[i]
                if not s.long:
                    k = min(k, max(0, self._long_at - len(s.tokens) - 1))
                    if len(s.tokens) >= self._long_at:
                        cross.append(i)
        ids = np.array([[j.last] for j in jobs], dtype=np.int64)
        try:
            if cross:
                logits = self._decode_crossing(jobs, ids, cross)
            elif k > 0:
                drafts = self.drafter.propose(
                    [np.concatenate([j.prompt, np.asarray(j.out, np.int64)]) for j in jobs], k)
                ids = np.concatenate([ids, drafts], axis=1)
                logits = self.model(ids, cache=self.cache.view(0, n), last_only=False)
            else:
                logits = self.model(ids, cache=self.cache.view(0, n), last_only=True)
        except Exception as e:  # one forward for every row: the rows decoding end with it,
            if self.drafter is not None:  # the queue and the prompt being read go on
                self.drafter.reset()
            for i in reversed(range(n)):
                self._fail(i, e)
            return
        done = []
        for i, j in enumerate(jobs):
            slot = self._slots[i]
            for p in range(k + 1):  # each position as a plain step would sample it
                slot.tokens.append(j.last)
                if self._sample(j, logits[i, p], slot):
                    done.append(i)
                    break
                if p == k or j.last != ids[i, p + 1]:  # the draft is wrong from here
                    break
            if k > 0:
                self.stats["draft_tokens"] += k
                self.stats["draft_accepted"] += len(slot.tokens) - self.cache.lengths[i] + k
                self.cache.truncate(i, len(slot.tokens))  # the rejected positions
        for i in reversed(done):
            self._release(i)

    def _decode_crossing(self, jobs: List[Job], ids: np.ndarray, cross: List[int]) -> np.ndarray:
        """One decode step of rows 0..n-1 (no draft) where the rows ``cross`` reach the
        original length + 1 of a longrope model: those run their whole sequence again
        (every key turned by the long factors), the others their one token; each row
        alone, so the same bits as in one batch (bc_gpt_forward's promise)."""
        rows = []
        for i, j in enumerate(jobs):
            view = self.cache.view(i, i + 1)
            if i in cross:
                self.cache.truncate(i, 0)
                seq = np.concatenate([j.prompt, np.asarray(j.out, np.int64)])
                rows.append(self.model(seq[None], cache=view, last_only=True)[0])
                self._slots[i].long = True
            else:
                rows.append(self.model(ids[i:i + 1], cache=view, last_only=True)[0])
        return np.stack(rows)

    def _sample(self, job: Job, logits: np.ndarray, slot: _Slot) -> bool:
        """Choose job's next token and send it; True when the job has ended (a failure
        of its own, in its sampler or its text, ends this job alone)."""
        try:
            return self._sample_one(job, logits)
        except Exception as e:
            self._end(job, "error", error=_describe(e))
            return True

    def _sample_one(self, job: Job, logits: np.ndarray) -> bool:
        if job.cancelled:  # gone while its step ran: nothing to send
            return True
        seen = (np.concatenate([job.prompt, np.asarray(job.out, np.int64)])
                if job.sampler.needs_seen else None)
        tok, lp, top = job.sampler(logits, seen)
        job.out.append(tok)
        job.last = tok
        self.stats["completion_tokens"] += 1
        if job.t_first is None:
            job.t_first = time.monotonic()
            self.stats["ttft_seconds_sum"] += job.t_first - job.t_submit
            self.stats["ttft_count"] += 1
            self.latency.observe("time_to_first_token", job.t_first - job.t_submit)
        if tok in job.end_ids or job.sampler.ends_row(tok):  # the end token: counted,
            self._end(job, "stop")                             # never shown
            return True
        piece, stopped = job.text.push(tok)
        job.emit(("token", piece, tok, lp, top))
        # a constraint that can take nothing more ends its row as an end token would
        if stopped or job.sampler.finished or len(job.out) >= job.max_tokens:
            self._end(job, "stop" if stopped or job.sampler.finished else "length")
            return True
        return False

    def _fail(self, i: int, e: BaseException) -> None:
        """Slot i's job failed in its forward: it ends with the error, the slot is
        emptied (its cache rows may be half written) and freed."""
        slot = self._slots[i]
        if slot.job is not None:
            self._end(slot.job, None if slot.job.cancelled else "error", error=_describe(e))
            slot.job.cancelled = False  # told already: _release must not tell it again
        self.cache.truncate(i, 0)
        slot.tokens = []
        self._release(i)

    def _end(self, job: Job, reason: Optional[str], error: Optional[str] = None) -> None:
        use = {"prompt_tokens": int(len(job.prompt)), "completion_tokens": len(job.out),
               "cached_tokens": job.reused}
        if job.t_first is not None:  # llama-server's timings: to the first token, after it
            now = time.monotonic()
            use["prompt_ms"] = (job.t_first - job.t_submit) * 1000.0
            use["predicted_ms"] = (now - job.t_first) * 1000.0
            if len(job.out) > 1:
                self.latency.observe("time_per_output_token",
                                     (now - job.t_first) / (len(job.out) - 1))
        if error:
            use["error"] = error
        tail = ""
        if reason in ("stop", "length"):
            try:
                tail = job.text.flush()
            except Exception as e:  # its text failed: the job fails, alone
                reason, use["error"] = "error", _describe(e)
            else:
                if job.text.stopped:  # a stop string the end completed: cut, and "stop"
                    reason = "stop"
        try:
            job.emit(("end", reason, use, tail))
        except Exception:  # the client's loop is gone: nothing to tell
            pass

    def _release(self, i: int) -> None:
        """Slot i's job is done (or gone): the slot is free, its tokens kept for reuse."""
        slot = self._slots[i]
        job = slot.job
        if job is not None and job.cancelled:
            self._end(job, None)
        slot.job = None
        if i == self._pf_slot:
            self._pf, self._pf_slot = None, -1
        elif i < self._n_dec:
            self._swap(i, self._n_dec - 1)
            self._n_dec -= 1

    def _swap(self, a: int, b: int) -> None:
        """Exchange slots a and b (their keys, values, tokens, jobs) through the scratch slot."""
        if a == b:
            return
        c, s = self.cache, self._scratch
        la, lb = c.lengths[a], c.lengths[b]
        c.copy_prefix(s, a, la)
        c.copy_prefix(a, b, lb)
        c.copy_prefix(b, s, la)
        if self.drafter is not None:
            self.drafter.swap(a, b, s)
        self._slots[a], self._slots[b] = self._slots[b], self._slots[a]
        if self._pf_slot == a:
            self._pf_slot = b
        elif self._pf_slot == b:
            self._pf_slot = a
