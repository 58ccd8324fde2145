// Package proc identifies processes across time: a tag "PID-STARTTIME"
// names one process for good (a recycled pid has another start time), so a
// later run can tell whether the owner of a leftover (a cgroup, a staging
// directory) is still alive before it reclaims it.
package proc
