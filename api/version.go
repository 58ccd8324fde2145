package api

// Protocol is the version of the contract between pullhelper and the
// programs that spawn it (package client): the flags a client passes, the
// JSON on stdout, the error object, the exit codes and the progress events.
// It grows by one whenever a client of the previous version could be misled
// (a flag it relies on changes meaning, a field changes type); additions a
// client may ignore leave it alone. A client refuses a binary whose
// protocol is lower than its own.
//
// 1: the first versioned contract (inline secrets over --pull-secret-fd and
// --authfile-fd, `version` reporting the protocol).
const Protocol = 1

// Version is the JSON object `pullhelper version` prints.
type Version struct {
	Version  string `json:"version"`
	Go       string `json:"go"`
	OSArch   string `json:"os_arch"`
	Protocol int    `json:"protocol"`
}
