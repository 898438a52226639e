package raft

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
)

// benchCodec is BenchmarkMsgAppFrame's view of the transport's codec (a
// file of its own so that the benchmark runs unchanged against the
// previous codec for benchstat).
type benchCodec struct {
	t  *tcpTransport
	rx *tcpTransport // the receiving node: the messages' To (2)
	fe frameEncoder
}

func newBenchCodec(t *tcpTransport) *benchCodec {
	return &benchCodec{t: t, rx: &tcpTransport{id: 2, budget: t.budget, done: t.done}}
}

func (c *benchCodec) send(batch []outMsg, w *bytes.Buffer) {
	if err := c.t.encode(&c.fe, batch); err != nil {
		panic(err)
	}
	vec := c.fe.buffers()
	vec.WriteTo(w)
	c.fe.reset()
}

func (c *benchCodec) receive(r *bufio.Reader) []outMsg {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		panic(err)
	}
	f, err := c.rx.readFrame(r, int(binary.BigEndian.Uint32(hdr[:])), nil)
	if err != nil {
		panic(err)
	}
	return f.msgs
}
