// Command meter runs one command and reports, as JSON, its wall time, the
// wait4 rusage of the whole tree, and — from the kernel's taskstats exit
// records (genetlink TASKSTATS, CONFIG_TASK_XACCT) — the CPU time and peak RSS
// of the command's own process separately from each of its descendants.
//
// Why taskstats: wait4 sums CPU over the process and its reaped children and
// reports max(own, children) as ru_maxrss, so a pullhelper parent and its
// pullhelper-child cannot be told apart from it; /proc can only be polled
// (a high-water mark read late misses the end) and the cgroup's memory peak
// includes page cache. The kernel sends one record per exiting thread, before
// the thread's mm is released and before the process can be reaped, holding
// its utime/stime (µs), tgid, parent tgid and the mm's hiwater_rss (KiB).
//
// Usage:
//
//	meter -o OUT.json [-fd3 FILE] [-proxy-listen ADDR -proxy-to ADDR] -- CMD [ARGS...]
//
// -proxy-listen relays TCP to -proxy-to and records when the first byte went
// each way (first_request_s, first_response_s), for time to first byte.
//
// Invariant: a report is produced only when no exit record was lost
// (ENOBUFS on the socket fails the run), and the records of the command's
// tree are complete when the command has been reaped: each thread's record
// is queued before the process becomes a zombie, and the socket is drained
// until it is empty after wait4 returns.
package main
