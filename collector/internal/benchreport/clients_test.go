package benchreport

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/itlmon/itlmon/collector/internal/itlmontest"
	"github.com/itlmon/itlmon/wasm/beacon"
)

// The ingest report's WebSocket clients run in a process of their own (this
// test binary started again with benchClientsEnv set), so the report counts
// the collector's CPU apart from theirs: in production they are browsers on
// other machines.
//
// The protocol, one line each way on the child's stdin and stdout:
// "round N" (the child encodes round N's frames, outside any timing) →
// "ready"; "go" (the child sends every frame and waits for every ack) →
// "done NANOSECONDS STEADY_PER_SECOND" or "error MESSAGE". Closing stdin
// ends the child.

const benchClientsEnv = "ITLMON_BENCH_CLIENTS"

// clientsConfig is the child's configuration (JSON in benchClientsEnv).
type clientsConfig struct {
	URL                                  string
	Clients, Batches, PerBatch, InFlight int
}

// maybeRunClients runs this process as the clients' process and exits when
// benchClientsEnv is set; else it returns.
func maybeRunClients() {
	v := os.Getenv(benchClientsEnv)
	if v == "" {
		return
	}
	if err := clientsProcess(v, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench clients:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func clientsProcess(config string, in io.Reader, out io.Writer) error {
	var c clientsConfig
	if err := json.Unmarshal([]byte(config), &c); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	// A batch is one frame, as browsers send it: gorilla's client splits
	// a message past its write buffer (4 KiB by default) into frames of
	// that size, which the collector reads one at a time; Chromium sends
	// a message up to 64 KiB as one frame, Firefox every message.
	dialer := websocket.Dialer{HandshakeTimeout: 30 * time.Second, WriteBufferSize: 64 << 10}
	conns := make([]*websocket.Conn, c.Clients)
	for i := range conns {
		h := http.Header{}
		h.Set("Origin", itlmontest.PageOrigin)
		h.Set("User-Agent", itlmontest.FirefoxUA)
		h.Set("CF-IPCountry", "DE")
		h.Set("CloudFront-Viewer-Country", "DE")
		conn, _, err := dialer.Dial(itlmontest.WSURL(c.URL, "test"), h)
		if err != nil {
			return fmt.Errorf("dial: %w", err)
		}
		defer conn.Close()
		conns[i] = conn
	}
	// One reader per connection for the process's life: it answers the
	// collector's pings between rounds too (a connection that reads
	// nothing for pongWait is closed), and hands the acks to the round.
	acks := make([]chan ackOrErr, len(conns))
	for i, conn := range conns {
		acks[i] = make(chan ackOrErr, c.InFlight+1)
		go func() {
			for {
				_, p, err := conn.ReadMessage()
				acks[i] <- ackOrErr{p, err}
				if err != nil {
					return
				}
			}
		}()
	}
	sc := bufio.NewScanner(in)
	var frames [][][]byte
	for sc.Scan() {
		cmd, arg, _ := strings.Cut(sc.Text(), " ")
		switch cmd {
		case "round":
			round, err := strconv.ParseUint(arg, 10, 32)
			if err != nil {
				return fmt.Errorf("round %q: %w", arg, err)
			}
			if frames, err = roundFrames(uint32(round), c.Clients, c.Batches, c.PerBatch); err != nil {
				return err
			}
			fmt.Fprintln(out, "ready")
		case "go":
			sd := &steady{total: c.Clients * c.Batches * c.PerBatch}
			d, err := sendFrames(conns, acks, frames, c.InFlight, c.PerBatch, sd)
			if err != nil {
				fmt.Fprintln(out, "error", strings.ReplaceAll(err.Error(), "\n", " "))
				continue
			}
			fmt.Fprintln(out, "done", d.Nanoseconds(), sd.rate())
		default:
			return fmt.Errorf("unknown command %q", sc.Text())
		}
	}
	return sc.Err()
}

// ackOrErr is one message a connection read, or its read error.
type ackOrErr struct {
	p   []byte
	err error
}

// sendFrames sends every client's frames with at most inFlight unacked,
// the acks coming from each connection's reader, and returns the time
// until the last ack.
func sendFrames(conns []*websocket.Conn, acks []chan ackOrErr, frames [][][]byte, inFlight, perFrame int, sd *steady) (time.Duration, error) {
	began := time.Now()
	errs := make(chan error, 2*len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(2)
		window := make(chan struct{}, inFlight)
		// stop: the acks ended early, the sender stops.
		stop := make(chan struct{})
		go func() { // acks
			defer wg.Done()
			defer close(stop)
			for range frames[i] {
				m := <-acks[i]
				err := m.err
				if err == nil {
					var a beacon.Ack
					if a, err = beacon.DecodeAck(m.p); err == nil && a.Reject != beacon.RejectNone {
						err = fmt.Errorf("batch %d refused: %v", a.Seq, a.Reject)
					}
				}
				if err != nil {
					errs <- err
					return
				}
				sd.done(perFrame)
				<-window
			}
		}()
		go func() {
			defer wg.Done()
			for _, f := range frames[i] {
				select {
				case window <- struct{}{}:
				case <-stop:
					return
				}
				if err := c.WriteMessage(websocket.BinaryMessage, f); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	d := time.Since(began)
	close(errs)
	return d, <-errs
}

// roundFrames encodes round's records (roundRecords) as each client's
// batches.
func roundFrames(round uint32, clients, batches, perBatch int) ([][][]byte, error) {
	recs := roundRecords(round, clients, batches, perBatch)
	frames := make([][][]byte, clients)
	for c := range frames {
		for b := 0; b < batches; b++ {
			k := (c*batches + b) * perBatch
			batch := beacon.Batch{Seq: uint64(b + 1), Client: beacon.Client{ConnType: "4g", Release: "r1", ModuleVersion: "test"}, Records: recs[k : k+perBatch]}
			p, err := batch.AppendBinary(nil)
			if err != nil {
				return nil, fmt.Errorf("encode batch: %w", err)
			}
			frames[c] = append(frames[c], p)
		}
	}
	return frames, nil
}

// roundRecords are round's records, client by client, batch by batch:
// the same content in the clients' process and in the direct insert's rows
// (their stream ids differ).
func roundRecords(round uint32, clients, batches, perBatch int) []beacon.Record {
	recs := make([]beacon.Record, clients*batches*perBatch)
	for i := range recs {
		recs[i] = benchRecord(100+round, uint32(i))
	}
	return recs
}

// clientsProc is the clients' process as the report drives it.
type clientsProc struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startClients(t *testing.T, c clientsConfig) *clientsProc {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), benchClientsEnv+"="+string(b))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &clientsProc{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	t.Cleanup(func() {
		in.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second): // a child stuck in a read: end it
			cmd.Process.Kill()
			<-done
		}
	})
	return p
}

func (p *clientsProc) pid() int { return p.cmd.Process.Pid }

// say sends line and returns the child's answer.
func (p *clientsProc) say(t *testing.T, line string) string {
	t.Helper()
	if _, err := fmt.Fprintln(p.in, line); err != nil {
		t.Fatalf("bench clients: %v", err)
	}
	if !p.out.Scan() {
		t.Fatalf("bench clients ended (%v)", p.out.Err())
	}
	return p.out.Text()
}

// prepare has the child encode round's frames.
func (p *clientsProc) prepare(t *testing.T, round uint32) {
	t.Helper()
	if got := p.say(t, "round "+strconv.FormatUint(uint64(round), 10)); got != "ready" {
		t.Fatalf("bench clients: %s", got)
	}
}

// run sends the prepared frames and returns the time until the last ack
// and the steady rate (records/s).
func (p *clientsProc) run(t *testing.T) (time.Duration, float64) {
	t.Helper()
	got := p.say(t, "go")
	f := strings.Fields(got)
	if len(f) != 3 || f[0] != "done" {
		t.Fatalf("bench clients: %s", got)
	}
	ns, err1 := strconv.ParseInt(f[1], 10, 64)
	rate, err2 := strconv.ParseFloat(f[2], 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("bench clients: %s", got)
	}
	return time.Duration(ns), rate
}
