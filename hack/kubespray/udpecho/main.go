// Command udpecho answers each UDP datagram with its payload, sent back to
// its sender: the UDP endpoint of the kubespray tier's traffic prober
// (hack/kubespray/run.sh, traffic_start), run beside the file server, off
// the cluster, so that an answer through the prober's Service proves a
// host's kube-proxy rules for UDP, conntrack included. It logs nothing per
// datagram.
//
//	udpecho [-listen ADDRESS]
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "udpecho:", err)
		os.Exit(1)
	}
}

// run parses args, listens and serves until the socket fails.
func run(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("udpecho", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", ":5353", "the UDP address to listen on, HOST:PORT")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q: the only flag is -listen", fs.Args())
	}
	conn, err := net.ListenPacket("udp", *listen)
	if err != nil {
		return fmt.Errorf("listen on udp %q: %w", *listen, err)
	}
	defer conn.Close()
	fmt.Fprintf(stderr, "udpecho: listening on udp %s\n", conn.LocalAddr())
	return serve(conn)
}

// serve writes every datagram conn receives back to its sender, until conn
// is closed (nil) or fails. A failed answer is not retried: the prober
// counts it as lost.
func serve(conn net.PacketConn) error {
	buf := make([]byte, 64*1024)
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("read: %w", err)
		}
		// an answer that cannot be sent (the sender gone) is the sender's
		// loss, not the server's end
		_, _ = conn.WriteTo(buf[:n], from)
	}
}
