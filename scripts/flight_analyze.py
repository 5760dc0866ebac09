#!/usr/bin/python3
"""Lines up weft flight-recorder dumps and says where a failed job got stuck (reliability R21).

Usage: flight_analyze.py DIR_OR_FILE...

Every replica whose function failed wrote <WEFT_DUMP>/weft-flight.<instance>.<replica>.json: the last
collectives it entered (execution serial, seq, op, group, state, times, call site). This script takes the
newest execution in the dumps, finds the first collective (seq) that did not complete, and names the
replicas of that execution that never reached it, e.g.

    stuck at seq=5 in group [0, 1, 2, 3]: missing: [2]

When the replicas at that collective timed out waiting (a stall), every replica that had not entered it before
the execution was aborted is missing (one that only came after the others gave up on it too). When they were
stopped by a failure elsewhere instead (a replica's own error aborted the execution), the missing ones are
those that never came to it. A replica with no dump (its process was killed, or the dump was lost) cannot
show that it arrived: it is counted as missing and named on its own line.

Standard library only (Debian's /usr/bin/python3); exit status 0 when the dumps were read, 2 when none
could be.
"""
import glob
import json
import os
import sys


def load(paths):
    dumps, problems = [], []
    files = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(glob.glob(os.path.join(p, "weft-flight.*.json")))
        else:
            files.append(p)
    for f in files:
        try:
            with open(f, encoding="utf-8") as fh:
                d = json.load(fh)
            if d.get("weft_flight_recorder") != 1:
                raise ValueError("not a weft flight-recorder dump")
            d["_file"] = f
            dumps.append(d)
        except (OSError, ValueError) as e:  # json.JSONDecodeError is a ValueError
            problems.append("%s: unreadable (%s)" % (f, e))
    return dumps, problems


def fmt(ids):
    return "[" + ", ".join(str(i) for i in sorted(ids)) + "]"


def analyze(dumps):
    """Returns the report's lines."""
    lines = []
    execution = max(d["execution"] for d in dumps)
    current = [d for d in dumps if d["execution"] == execution]
    # Dumps of an older execution come from replicas that failed earlier; they say nothing about this one.
    stale = sorted(d["replica"] for d in dumps if d["execution"] != execution)
    replicas = max(d["replicas"] for d in current)
    name = current[0].get("execution_name", "")
    by_replica = {d["replica"]: d for d in current}
    records = {}  # replica -> {seq: record} of the newest execution
    for r, d in by_replica.items():
        records[r] = {rec["seq"]: rec for rec in d["records"] if rec["execution"] == execution}

    def reached(r, seq):
        rec = records.get(r, {}).get(seq)
        return rec is not None and not rec.get("entered_after_abort", False)

    unfinished = sorted({seq for recs in records.values() for seq, rec in recs.items()
                         if rec["state"] != "completed"})
    if not unfinished:
        # Every collective the dumps show completed: the failure was in a replica's own code.
        last = max((seq for recs in records.values() for seq in recs), default=None)
        lines.append("no stuck collective in execution #%d %s: the failure was outside collectives "
                     "(last collective seq=%s)" % (execution, name, "none" if last is None else last))
    else:
        seq = unfinished[0]
        arrived = [r for r in range(replicas) if reached(r, seq)]
        came = [r for r in range(replicas) if seq in records.get(r, {})]
        # Did the ones there wait for the others until their deadline (a stall), or were they stopped by a
        # failure elsewhere (a replica's own error aborted the execution)?
        waited = any(records[r][seq]["state"] == "failed" and
                     records[r][seq].get("error_type") in ("TimeoutError", "PeerLostError") for r in arrived)
        if waited:
            # Stalled: whoever was not there when the deadline passed is missing, also if it came later.
            missing = [r for r in range(replicas) if r not in arrived]
        else:
            # Stopped by a failure elsewhere: a replica that came a moment after it is not to blame; the ones
            # that never came are where it failed.
            missing = [r for r in range(replicas) if r not in came]
        rec = records[(arrived or came)[0]][seq]
        group = rec.get("group", [])
        head = "stuck at seq=%d in group %s: missing: %s" % (seq, fmt(group), fmt(missing))
        if not missing:
            head = "failed at seq=%d in group %s: every replica arrived" % (seq, fmt(group))
        lines.append(head)
        lines.append("  execution #%d %s, %d replicas; %s(%s, %d elements) at %s" %
                     (execution, name, replicas, rec["op"], rec["dtype"], rec["count"], rec["site"]))
        lines.append("  arrived: %s" % fmt(arrived))
        if not waited and missing:
            lines.append("  (no replica timed out at seq=%d: the execution failed outside this collective)" % seq)
        for r in missing:
            if r not in by_replica:
                lines.append("  replica %d: no dump (its process ended, or the dump was lost): counted as missing" % r)
                continue
            recs = records[r]
            done = [s for s, x in recs.items() if x["state"] == "completed"]
            text = "  replica %d: last completed seq=%s" % (r, max(done) if done else "none")
            if seq in recs:
                text += ", came to seq=%d only after the execution was aborted" % seq
            error = by_replica[r].get("error", "")
            if error and seq not in recs:
                text += "; its error: %s" % error
            lines.append(text)
        errors = {}
        for r in came:
            x = records[r][seq]
            if x["state"] == "failed":
                errors.setdefault(x.get("error_type", "Error"), []).append(r)
        for kind, rs in sorted(errors.items()):
            lines.append("  %s on %s" % (kind, fmt(rs)))
    if stale:
        lines.append("  dumps of an earlier execution (ignored): replicas %s" % fmt(stale))
    no_dump = [r for r in range(replicas) if r not in by_replica]
    if no_dump:
        lines.append("  no dump from replicas %s" % fmt(no_dump))
    return lines


def main(argv):
    if len(argv) < 2:
        sys.stderr.write("usage: flight_analyze.py DIR_OR_FILE...\n")
        return 2
    dumps, problems = load(argv[1:])
    for p in problems:
        sys.stderr.write("flight_analyze: %s\n" % p)
    if not dumps:
        sys.stderr.write("flight_analyze: no flight-recorder dump found in %s\n" % " ".join(argv[1:]))
        return 2
    for line in analyze(dumps):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
