#!/usr/bin/env python3
"""Reads `strace -f -o FILE` traces of pullhelper; prints the system calls
the re-executed child (and its threads) made after its seccomp filter was
installed: name, count, distinct errors. See tests/seccomp-derive.sh."""
import re
import sys
from collections import Counter, defaultdict

LINE = re.compile(r'^(\d+)\s+(?:<\.\.\. (\w+) resumed>|(\w+)\()(.*)$')
RET = re.compile(r'\)\s+=\s+(-?\d+|\?|0x[0-9a-f]+)(?:\s+(E[A-Z0-9]+))?')

counts = Counter()
errors = defaultdict(Counter)
# calls with argument rules in privdrop.Filter: the arguments they check
ARGS = {'prctl': 1, 'socket': 3, 'ioctl': 2, 'personality': 1, 'clone': 1}
args = defaultdict(Counter)


def record(name, text):
    counts[name] += 1
    if name in ARGS:
        a = [x.strip() for x in text.split(',')]
        if name in ('ioctl', 'clone'):
            a = a[1:2]
        args[name][', '.join(a[:ARGS[name]])[:60]] += 1
for path in sys.argv[1:]:
    group = {}      # tid -> child tgid (members of a pull child)
    filtered = set()  # tgids whose filter is installed
    pending = {}    # tid -> text of an unfinished call
    with open(path, errors='replace') as f:
        for line in f:
            m = LINE.match(line)
            if not m:
                continue
            tid = int(m.group(1))
            resumed, name, rest = m.group(2), m.group(3), m.group(4)
            if resumed:
                name = resumed
                text = pending.pop(tid, '') + rest
            elif rest.endswith('<unfinished ...>'):
                pending[tid] = rest
                if tid in group and group[tid] in filtered:
                    record(name, rest)
                continue
            else:
                text = rest
                if tid in group and group[tid] in filtered:
                    record(name, rest)
            if name == 'execve' and '"/proc/self/exe", ["pullhelper-child"' in text:
                r = RET.search(text)
                if r and r.group(1) == '0':
                    group[tid] = tid
                continue
            if tid not in group:
                continue
            r = RET.search(text)
            if name in ('clone', 'clone3', 'fork', 'vfork') and r and r.group(1).isdigit() and int(r.group(1)) > 0:
                new = int(r.group(1))
                # a thread joins the group; a new process is its own, filtered too
                group[new] = group[tid] if 'CLONE_THREAD' in text else new
                if group[tid] in filtered:
                    filtered.add(group[new])
            if name == 'seccomp' and 'SECCOMP_SET_MODE_FILTER' in text and r and r.group(1) == '0':
                filtered.add(group[tid])
                continue
            if group[tid] in filtered and r and r.group(2):
                errors[name][r.group(2)] += 1

for name, n in sorted(counts.items()):
    e = ' '.join(f'{k}:{v}' for k, v in sorted(errors[name].items()))
    print(f'{name:24} {n:9d}  {e}')
for name in sorted(args):
    for a, n in sorted(args[name].items()):
        print(f'  {name}({a}) {n}')
