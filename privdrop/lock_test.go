package privdrop_test

import "runtime"

func runtimeLock() { runtime.LockOSThread() }
