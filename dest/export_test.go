package dest

// SetCommitHook lets tests observe DEST between the steps of a dir: commit.
func SetCommitHook(f func(step string)) { commitHook = f }

// ForceWalk makes openAt use the O_NOFOLLOW component walk (as on a kernel
// without openat2) until the returned function is called.
func ForceWalk() func() {
	openat2Missing = true
	return func() { openat2Missing = false }
}
