package privdrop

// Test hooks: the filter without the rest of Drop (loading a filter needs
// only no_new_privs, so the tests can run it unprivileged), and the
// architecture's syscall numbers.
var LoadFilter = loadFilter

func SyscallNumber(name string) (uint32, bool) { n, ok := sysnum[name]; return n, ok }

var NotOnThisArch = notOnThisArch

const NativeArch = nativeArch

func SyscallNames() map[string]uint32 { return sysnum }
