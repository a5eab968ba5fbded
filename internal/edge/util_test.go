package edge

import (
	"runtime"
	"strconv"
)

func itoa(i int) string { return strconv.Itoa(i) }

func heapAlloc() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
