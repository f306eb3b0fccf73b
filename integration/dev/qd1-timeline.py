#!/usr/bin/env python3
"""Segments of 4k QD1 I/Os from integration/dev/qd1-timeline.sh traces (see there)."""
import sys, re, statistics as st
def parse(path):
    ev=[]
    for l in open(path):
        if l.startswith('#'): continue
        m=re.match(r'\s*(.+?)-(\d+)\s+\[(\d+)\]\s+\S+\s+([\d.]+): (\w+):(.*)', l)
        if not m: continue
        task,pid,cpu,ts,name,rest=m.groups()
        ev.append((float(ts)*1e6,task,int(cpu),name,rest))
    return ev
def analyze(path):
    ev=parse(path)
    ios=[]; cur=None
    for e in ev:
        if e[3]=='nvme_setup_cmd':
            cur=[e]; ios.append(cur)
        elif cur is not None:
            cur.append(e)
    seg={k:[] for k in 'A B C D E T'.split()}
    cpus={}
    for io in ios:
        t0=io[0][0]
        try:
            hp=next(e for e in io if e[3]=='rxepost' and e[1].startswith('fio'))
            r1=next(e for e in io if e[3]=='rxerecv' and e[0]>hp[0])
            cqe=next(e for e in io if e[3]=='rxecq' and e[0]>r1[0])
            tp=next(e for e in io if e[3]=='rxepost' and not e[1].startswith('fio') and e[0]>cqe[0])
            done=next(e for e in io if e[3]=='nvme_complete_rq')
        except StopIteration:
            continue
        seg['A'].append(hp[0]-t0); seg['B'].append(r1[0]-hp[0]); seg['C'].append(cqe[0]-r1[0])
        seg['D'].append(tp[0]-cqe[0]); seg['E'].append(done[0]-tp[0]); seg['T'].append(done[0]-t0)
        k=(io[0][2], cqe[1].split('/')[0], cqe[2], tp[1].split('-')[0][:12], tp[2])
        cpus[k]=cpus.get(k,0)+1
    out=' '.join(f"{k}={st.median(v):.0f}" for k,v in seg.items() if v)
    top=sorted(cpus.items(), key=lambda x:-x[1])[:3]
    return f"{path}: n={len(seg['T'])} {out}  (fio cpu, cqe task, cqe cpu, responder task, cpu): {top}"
for p in sys.argv[1:]: print(analyze(p))
