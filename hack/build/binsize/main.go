// Command binsize prints the packages that take the most room in a Go
// binary: the sizes of its symbols (code and data actually in the file, not
// zero-filled memory), summed per package. Build the binary without -s -w
// (stripped binaries have no symbol table).
//
//	go run ./hack/build/binsize [-top 15] BINARY
package main

import (
	"debug/elf"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

func main() {
	top := flag.Int("top", 15, "how many packages to print")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: binsize [-top N] BINARY (an unstripped ELF binary)")
		os.Exit(2)
	}
	if err := run(os.Stdout, flag.Arg(0), *top); err != nil {
		fmt.Fprintln(os.Stderr, "binsize:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, path string, top int) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return fmt.Errorf("%s: %w (build it without -ldflags '-s -w')", path, err)
	}
	perPkg := map[string]uint64{}
	var total uint64
	for _, s := range syms {
		if s.Section == elf.SHN_UNDEF || int(s.Section) >= len(f.Sections) || s.Size == 0 {
			continue
		}
		if f.Sections[s.Section].Type == elf.SHT_NOBITS {
			continue // .bss: memory at run time, nothing in the file
		}
		perPkg[Package(s.Name)] += s.Size
		total += s.Size
	}
	type row struct {
		pkg  string
		size uint64
	}
	rows := make([]row, 0, len(perPkg))
	for p, n := range perPkg {
		rows = append(rows, row{p, n})
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].size != rows[j].size {
			return rows[i].size > rows[j].size
		}
		return rows[i].pkg < rows[j].pkg
	})
	fmt.Fprintf(w, "%10s  %5s  %s\n", "bytes", "share", "package (symbols only; pclntab and runtime metadata not attributed)")
	for i, r := range rows {
		if i == top {
			break
		}
		fmt.Fprintf(w, "%10d  %4.1f%%  %s\n", r.size, 100*float64(r.size)/float64(total), r.pkg)
	}
	fmt.Fprintf(w, "%10d  100%%  all %d packages\n", total, len(rows))
	return nil
}

// Package is the import path a Go symbol belongs to, e.g.
// "k8s.io/api/core/v1" for "type:*k8s.io/api/core/v1.Pod" or
// "k8s.io/api/core/v1.(*Pod).Marshal".
func Package(sym string) string {
	if strings.HasPrefix(sym, "go:func.") {
		return "(func metadata)"
	}
	if itab, ok := strings.CutPrefix(sym, "go:itab."); ok {
		sym, _, _ = strings.Cut(itab, ",") // the concrete type's package
	}
	for _, prefix := range []string{"type:", "go:", "*", "*"} {
		sym = strings.TrimPrefix(sym, prefix)
	}
	sym = strings.TrimPrefix(sym, ".eq.")
	if strings.HasPrefix(sym, "struct") || strings.HasPrefix(sym, "(*struct") || strings.HasPrefix(sym, "func(") {
		return "(anonymous types)"
	}
	// the package path ends at the first dot after its last slash (dots in
	// the last element are escaped as %2e); generic instantiations and
	// method receivers come after it
	end := len(sym)
	if i := strings.IndexAny(sym, "[("); i >= 0 {
		end = i
	}
	slash := strings.LastIndex(sym[:end], "/")
	if dot := strings.Index(sym[slash+1:], "."); dot >= 0 {
		sym = sym[:slash+1+dot]
	}
	return strings.ReplaceAll(sym, "%2e", ".")
}
