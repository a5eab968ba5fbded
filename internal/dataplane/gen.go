package dataplane

// The BPF objects are built by bpf2go from ../../bpf and committed, so `go
// build` needs no clang. `make generate` reruns this; CI checks that the
// committed files match the sources.
//
// Every map key and value is declared once, in bpf/lib/structs.h; bpf2go
// turns the ones each object uses into Go types (edgeEipKey, agentEipKey, ...,
// identical where the C type is the same).
//
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type ip_addr -type lb_range -go-package dataplane edge ../../bpf/edge.c -- -I../../bpf -I/usr/include/x86_64-linux-gnu
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type ip_addr -go-package dataplane agent ../../bpf/agent.c -- -I../../bpf -I/usr/include/x86_64-linux-gnu
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -go-package dataplane bench ../../bpf/bench.c -- -I../../bpf -I/usr/include/x86_64-linux-gnu
