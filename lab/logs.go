package lab

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// maxLogLine is the longest line written as one CRI log record; longer
// lines are split into partial records, as containerd does.
const maxLogLine = 16 * 1024

// logFile is a container's log file in the CRI format that the kubelet,
// kubectl logs and crictl logs read: one record per line,
//
//	<RFC3339Nano time> <stdout|stderr> <F|P> <content>
//
// where P marks a chunk of a line too long for one record and F the end of
// a line. stdout and stderr share the file, so records are written whole
// under a lock.
type logFile struct {
	mu     sync.Mutex
	path   string // empty: the output is discarded
	f      *os.File
	closed bool
	failed bool // a write failed and was logged; later failures are not
	logf   func(format string, args ...any)
}

// openLogFile opens the log file at path for appending, creating its
// directory. An empty path gives a logFile that discards everything.
func openLogFile(path string, logf func(string, ...any)) (*logFile, error) {
	l := &logFile{path: path, logf: logf}
	if path == "" {
		return l, nil
	}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *logFile) open() error {
	if err := os.MkdirAll(filepath.Dir(l.path), 0o755); err != nil {
		return fmt.Errorf("create log dir for %q: %w", l.path, err)
	}
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("open container log %q: %w", l.path, err)
	}
	l.f = f
	return nil
}

// write appends one record.
func (l *logFile) write(stream string, partial bool, content []byte) {
	tag := "F"
	if partial {
		tag = "P"
	}
	record := make([]byte, 0, len(content)+64)
	record = time.Now().AppendFormat(record, time.RFC3339Nano)
	record = append(record, ' ')
	record = append(record, stream...)
	record = append(record, ' ')
	record = append(record, tag...)
	record = append(record, ' ')
	record = append(record, content...)
	record = append(record, '\n')

	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return
	}
	if _, err := l.f.Write(record); err != nil && !l.failed {
		l.failed = true
		l.logf("write container log %q: %v", l.path, err)
	}
}

// reopen closes the file and opens a new one at the same path, after the
// kubelet has renamed the old one away to rotate it.
func (l *logFile) reopen() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.path == "" || l.closed {
		return nil
	}
	if l.f != nil {
		_ = l.f.Close() // a write error would have been logged
		l.f = nil
	}
	l.failed = false
	return l.open()
}

func (l *logFile) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.f != nil {
		_ = l.f.Close() // a write error would have been logged
		l.f = nil
	}
}

// openOutput creates a FIFO at path for one of a process's output streams
// and opens both ends. The output goes through a FIFO in the state dir,
// rather than a pipe, so that a restarted runtime can open it again and go
// on copying the output of a process it did not start.
//
// The process gets the write end opened read-write: since it then holds a
// reader itself, its writes never fail with EPIPE (or SIGPIPE) while no
// runtime runs. They block once the pipe is full, until a restarted runtime
// drains it; the pipe is enlarged to let that take a while.
func openOutput(path string) (r, w *os.File, err error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("create output FIFO %q: %w", path, err)
	}
	if err := unix.Mkfifo(path, 0o600); err != nil {
		return nil, nil, fmt.Errorf("create output FIFO %q: %w", path, err)
	}
	r, err = openOutputReader(path)
	if err != nil {
		return nil, nil, err
	}
	// A blocking descriptor, since the process inherits it as is.
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		closeFiles(r)
		return nil, nil, fmt.Errorf("open output FIFO %q: %w", path, err)
	}
	_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETPIPE_SZ, 1<<20) // best effort: the default is 64 KiB
	return r, os.NewFile(uintptr(fd), path), nil
}

// openOutputReader opens a FIFO's read end without waiting for a writer.
// The file goes through Go's poller, so reads block only their goroutine
// and return io.EOF once no process holds the write end any more.
func openOutputReader(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open output FIFO %q: %w", path, err)
	}
	return f, nil
}

// copyOutput copies a process's stdout and stderr (either may be nil) to
// its log file until both reach EOF, then closes the log file and the
// returned channel.
func copyOutput(stdout, stderr *os.File, logs *logFile) <-chan struct{} {
	done := make(chan struct{})
	var wg sync.WaitGroup
	if stdout != nil {
		wg.Go(func() { copyLines(stdout, logs, "stdout") })
	}
	if stderr != nil {
		wg.Go(func() { copyLines(stderr, logs, "stderr") })
	}
	go func() {
		wg.Wait()
		logs.close()
		close(done)
	}()
	return done
}

// copyLines writes every line of r as a record of the given stream.
func copyLines(r *os.File, logs *logFile, stream string) {
	defer closeFiles(r)
	br := bufio.NewReaderSize(r, maxLogLine)
	for {
		line, err := br.ReadSlice('\n')
		switch {
		case err == nil:
			logs.write(stream, false, line[:len(line)-1])
		case errors.Is(err, bufio.ErrBufferFull):
			logs.write(stream, true, line)
		default: // EOF, or the reader was closed: a last line without newline is still a line
			if len(line) > 0 {
				logs.write(stream, false, line)
			}
			return
		}
	}
}
