package startpages

import (
	"reflect"
	"unsafe"
)

var writable = 1

func funcPC() uintptr  { return reflect.ValueOf(funcPC).Pointer() }
func varAddr() uintptr { return uintptr(unsafe.Pointer(&writable)) }
