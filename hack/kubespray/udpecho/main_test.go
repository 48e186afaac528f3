package main

import (
	"bytes"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestServeEchoesEachDatagramToItsSender(t *testing.T) {
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- serve(conn) }()

	// two clients, each must get its own payloads back, in order
	for c := range 2 {
		client, err := net.Dial("udp", conn.LocalAddr().String())
		require.NoError(t, err)
		defer client.Close()
		for i := range 3 {
			payload := fmt.Sprintf("kps-%d-%d\n", c, i)
			_, err := client.Write([]byte(payload))
			require.NoError(t, err)
			require.NoError(t, client.SetReadDeadline(time.Now().Add(5*time.Second)))
			buf := make([]byte, 100)
			n, err := client.Read(buf)
			require.NoError(t, err, "no answer to %q", payload)
			assert.Equal(t, payload, string(buf[:n]))
		}
	}

	require.NoError(t, conn.Close())
	select {
	case err := <-done:
		assert.NoError(t, err, "serve after its socket was closed")
	case <-time.After(5 * time.Second):
		t.Fatal("serve did not return within 5s of its socket being closed")
	}
}

func TestRunRejectsBadInput(t *testing.T) {
	for name, args := range map[string][]string{
		"unknown flag":   {"-port", "1"},
		"extra argument": {"-listen", "127.0.0.1:0", "more"},
		"bad address":    {"-listen", "127.0.0.1:notaport"},
	} {
		t.Run(name, func(t *testing.T) {
			var stderr bytes.Buffer
			assert.Error(t, run(args, &stderr))
		})
	}
}
