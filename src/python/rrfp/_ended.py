"""A process of a c10d job that frees a pipeline, or whose script ends, says so in
torch.distributed's store, so that another, waiting for it in a call's gather, names it: that
gather failed on Gloo's "Connection closed by peer [127.0.0.1]:64128" alone, naming no process.
(Under mpirun the end is a call of its own, which the others meet in that gather:
pipeline_core.cpp's end_of_script.)"""
import threading

_ENDED, _FREED, _LAST = "rrfp/ended/", "rrfp/freed/", "rrfp/last-freed/"
# Set where a process's script ended after its last pipeline call raised: it ended for a
# failure (its own or another's), not because its script ran out before the others' calls.
_RAISED = "rrfp/raised/"
# The most a call on the store takes here: its host (global rank 0 outside torchrun) may have
# ended first, or stopped answering.
_NOTE_S = 2
_built = [False]  # a c10d pipeline was built in this process
# The job's gathers this process came to (_calls.gather), the one under way included: its key
# _ENDED holds that count plus one, so that a process whose gather failed tells the processes
# that never came to it from those that came and ended after failing in it, as it did.
_entered = [0]
_freed = [0]  # the c10d pipelines this process freed, as it told the store
_last_raised = [False]  # the last call of a pipeline of this process raised (_live.hold)
# What the last pipeline a process freed was (its key _LAST): one it had built, one whose
# building it refused on its own (an option it alone refused once the groups were made), or one
# whose building failed on every process (a peer's refusal ended it in a gather).
BUILT, REFUSED, FAILED = 0, 1, 2


def c10d_pipeline_built():
    _built[0] = True


def _store():
    """The default group's store, this process's global rank and the job's size, or None."""
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()):
        return None
    return dist.distributed_c10d._get_default_store(), dist.get_rank(), dist.get_world_size()


def _bounded(work, default):
    """work(store, me, size) on the default group's store, in at most _NOTE_S seconds, or
    `default`: where the store's host is stopped or hung, a call on it blocks whatever its
    timeout (set_timeout left an add() waiting over a minute), and a process hung after its
    error, or in a call's gather without one. On a thread of its own, left behind (a daemon)
    where it does not end; `default` too where the store cannot be reached or raises."""
    out = [default]

    def run():
        try:
            found = _store()
            if found is not None:
                out[0] = work(*found)
        except Exception:  # the store went with its host, or the group was destroyed
            pass
    try:
        thread = threading.Thread(target=run, name="rrfp-store", daemon=True)
        thread.start()
    except RuntimeError:  # no new thread at the interpreter's shutdown: as it was
        run()
        return out[0]
    thread.join(_NOTE_S)
    return out[0] if not thread.is_alive() else default


def gather_entered():
    """A gather of the job's begins (_calls.gather)."""
    _entered[0] += 1


def call_ended(raised):
    """A call of a pipeline of this process ended (_live.hold), raising or not."""
    _last_raised[0] = raised


def note_end():
    """At the end of the script (rrfp's atexit, before the pipelines close): this process's key
    in the store, within _NOTE_S seconds."""
    def add(store, me, _):
        if _last_raised[0]:  # first: a process reading the other key then finds this one
            store.add(_RAISED + str(me), 1)
        store.add(_ENDED + str(me), _entered[0] + 1)
    if _built[0]:
        _bounded(add, None)


def note_freed(kind=BUILT):
    """Before a pipeline's groups are destroyed (_c10d._destroy_groups): one more freed, of
    `kind`. The processes build and free their pipelines alike, so one that freed more than
    another holds a pipeline the other still uses, or refused one the other was building: its
    last kind says which (a process that refused an option on its own was told as one that "had
    freed a Pipeline this process still uses"). The last kind alone: a count of refusals, read
    against this process's, would name such a process again at every later failure."""
    _freed[0] += 1

    def add(store, me, _):
        store.add(_FREED + str(me), 1)
        last = _LAST + str(me)
        store.add(last, kind - store.add(last, 0))  # set: an add of 0 reads without waiting
    _bounded(add, None)


def gone():
    """In words, the processes whose script ended, that freed a pipeline this one still uses
    or refused on their own one this one was building, read from the store (an add of 0 reads
    without waiting for the key) within _NOTE_S seconds, and whether any of them is a script
    that ran out or a pipeline freed (calls that differ); ("", False) where none is known or the
    store cannot be read."""
    def read(store, me, size):
        others = [r for r in range(size) if r != me]
        came = {r: store.add(_ENDED + str(r), 0) - 1 for r in others}  # gathers; -1: alive
        left = [r for r in others if came[r] >= 0]
        ahead = {r: store.add(_LAST + str(r), 0) for r in others
                 if r not in left and store.add(_FREED + str(r), 0) > _freed[0]}
        # Those that never came to this gather, where any: the others ended after failing in
        # it, for want of them (a rank that left a pp 2 x dp 2 job was named with two more).
        ended = [r for r in left if came[r] < _entered[0]] or left
        raised = [r for r in ended if store.add(_RAISED + str(r), 0) > 0]
        silent = [r for r in others if r not in left and r not in ahead]
        # One whose building failed as this one's did, after another's refusal, is left out.
        return ended, raised, silent, [r for r, k in ahead.items() if k == REFUSED], [
            r for r, k in ahead.items() if k == BUILT]
    ended, raised, silent, refused, freed = _bounded(read, ([], [], [], [], []))
    ran_out = [r for r in ended if r not in raised]
    said = [f"the script of global rank(s) {ran_out} had ended"] if ran_out else []
    if raised:
        # Processes that ended on an error of a call of theirs: the first to fail may be another,
        # which a kill -9, the out-of-memory killer or os._exit ended without a word (the
        # others, failing after it, were named as scripts that "had ended" before the call).
        said.append(f"the script of global rank(s) {raised} had ended after a call of its "
                    "pipeline raised (its error is in that process's output)" +
                    (f"; global rank(s) {silent} said nothing (still running, or ended without "
                     "a word: killed, out of memory, os._exit)" if silent and not ran_out
                     else ""))
    if refused:
        said.append(f"global rank(s) {refused} refused, on its own, the Pipeline being built "
                    "(its error is in that process's output)")
    if freed:
        said.append(f"global rank(s) {freed} had freed a Pipeline this process still uses (no "
                    "longer referenced, as a local of a function that returned)")
    return "; ".join(said), bool(ran_out or refused or freed)
