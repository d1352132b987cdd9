//! `pipe(2)` and `splice(2)` from a socket into a pipe, for packetdrill's
//! interface (which has both): a pipe is a byte queue between two
//! descriptors of this layer. Splicing from a socket reads as Linux's
//! `tcp_splice_read` does (`tcp_read_sock`): up to the urgent mark, never
//! past it, so a splice at the mark returns 0 while data waits behind it.
//!
//! A pipe end never blocks: nothing but this process's own calls fill or
//! drain it, so a read of an empty pipe (or a write to a full one) that
//! waited would wait forever; it fails with `EAGAIN` instead.

use std::collections::VecDeque;

use ustack_core::tcp::TcpError;

use crate::{
    Entry, Host, SockResult, Tcp, POLLERR, POLLHUP, POLLIN, POLLOUT, POLLRDNORM, POLLWRNORM,
};

/// Linux's default pipe size (16 pages).
pub const PIPE_SIZE: usize = 65_536;

/// One end of a pipe.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PipeEnd {
    pub(crate) id: u64,
    pub(crate) write: bool,
    pub(crate) nonblock: bool,
}

/// The queue between the two ends, and which ends are open.
#[derive(Debug, Default)]
pub(crate) struct Pipe {
    buf: VecDeque<u8>,
    reader: bool,
    writer: bool,
    /// Changes so far (bytes in or out, an end closed): what an
    /// edge-triggered epoll reports, as Linux's pipe wakes its waiters on
    /// each.
    pub(crate) events: u64,
}

impl Host {
    fn pipe_end(&self, fd: i32) -> Option<PipeEnd> {
        match self.entry(fd) {
            Some(Entry::Pipe(p)) => Some(*p),
            _ => None,
        }
    }

    /// `pipe(2)`: (read end, write end).
    pub fn pipe(&mut self) -> (i32, i32) {
        let id = self.next_pipe;
        self.next_pipe += 1;
        self.pipes.insert(
            id,
            Pipe {
                buf: VecDeque::new(),
                reader: true,
                writer: true,
                events: 0,
            },
        );
        let r = self.alloc(Entry::Pipe(PipeEnd {
            id,
            write: false,
            nonblock: false,
        }));
        let w = self.alloc(Entry::Pipe(PipeEnd {
            id,
            write: true,
            nonblock: false,
        }));
        (r, w)
    }

    /// Whether `fd` is a pipe end.
    pub fn is_pipe(&self, fd: i32) -> bool {
        self.pipe_end(fd).is_some()
    }

    /// An end closed: the pipe goes with its last end.
    pub(crate) fn close_pipe_end(&mut self, p: PipeEnd) {
        if let Some(q) = self.pipes.get_mut(&p.id) {
            if p.write {
                q.writer = false;
            } else {
                q.reader = false;
            }
            q.events += 1;
            if !q.reader && !q.writer {
                self.pipes.remove(&p.id);
            }
        }
    }

    /// `read(2)` from a pipe's read end: 0 once empty with the write end
    /// closed.
    pub fn pipe_read(&mut self, fd: i32, out: &mut [u8]) -> SockResult<usize> {
        let p = self.pipe_end(fd).ok_or(libc::EBADF)?;
        if p.write {
            return Err(libc::EBADF);
        }
        let q = self.pipes.get_mut(&p.id).ok_or(libc::EBADF)?;
        if q.buf.is_empty() {
            return if q.writer { Err(libc::EAGAIN) } else { Ok(0) };
        }
        let n = out.len().min(q.buf.len());
        for (o, b) in out.iter_mut().zip(q.buf.drain(..n)) {
            *o = b;
        }
        q.events += 1;
        Ok(n)
    }

    /// `write(2)` to a pipe's write end: `EPIPE` once the read end is
    /// closed.
    pub fn pipe_write(&mut self, fd: i32, data: &[u8]) -> SockResult<usize> {
        let p = self.pipe_end(fd).ok_or(libc::EBADF)?;
        if !p.write {
            return Err(libc::EBADF);
        }
        let q = self.pipes.get_mut(&p.id).ok_or(libc::EBADF)?;
        if !q.reader {
            return Err(libc::EPIPE);
        }
        let n = data.len().min(PIPE_SIZE - q.buf.len());
        if n == 0 && !data.is_empty() {
            return Err(libc::EAGAIN);
        }
        q.buf.extend(&data[..n]);
        q.events += u64::from(n > 0);
        Ok(n)
    }

    /// `poll(2)` bits of a pipe end.
    pub(crate) fn pipe_readiness(&self, p: PipeEnd) -> u32 {
        let Some(q) = self.pipes.get(&p.id) else {
            return libc::POLLNVAL as u32;
        };
        match p.write {
            false if !q.buf.is_empty() => POLLIN | POLLRDNORM,
            false if !q.writer => POLLHUP,
            false => 0,
            true if !q.reader => POLLERR,
            true if q.buf.len() < PIPE_SIZE => POLLOUT | POLLWRNORM,
            true => 0,
        }
    }

    /// `splice(2)` from the socket `fd` into the pipe whose write end is
    /// `pipe_fd`, at most `len` bytes: Linux `tcp_splice_read` for one
    /// look (the caller waits and looks again on `EAGAIN`). What is
    /// readable in front of the urgent mark moves into the pipe; 0 at the
    /// mark (Linux: "if __tcp_splice_read() got nothing while we have an
    /// skb in receive queue, we do not want to loop. This might happen
    /// with URG data.") and at the end of the stream.
    pub fn splice_to_pipe(&mut self, fd: i32, pipe_fd: i32, len: usize) -> SockResult<usize> {
        let p = self.pipe_end(pipe_fd).ok_or(libc::EBADF)?;
        if !p.write {
            return Err(libc::EBADF);
        }
        let room = {
            let q = self.pipes.get(&p.id).ok_or(libc::EBADF)?;
            if !q.reader {
                return Err(libc::EPIPE);
            }
            PIPE_SIZE - q.buf.len()
        };
        let h = match self.sock(fd)?.tcp {
            Tcp::Conn { .. } => self.conn(fd)?,
            _ => return Err(libc::ENOTCONN),
        };
        let rd_shut = self.sock(fd)?.rd_shut;
        if len == 0 {
            return Ok(0);
        }
        if room == 0 {
            return Err(libc::EAGAIN);
        }
        let want = len.min(room);
        let mut chunk: Vec<u8> = Vec::new();
        let r = self.stack.tcp_read_to_mark_with(h, |a, b| {
            let n = a.len().min(want);
            chunk.extend_from_slice(&a[..n]);
            let m = b.len().min(want - n);
            chunk.extend_from_slice(&b[..m]);
            n + m
        });
        self.flush();
        match r {
            Ok(n) => {
                if let Some(q) = self.pipes.get_mut(&p.id) {
                    q.buf.extend(&chunk[..n.min(chunk.len())]);
                    q.events += u64::from(n > 0);
                }
                Ok(n)
            }
            Err(TcpError::WouldBlock) if rd_shut => Ok(0),
            Err(TcpError::WouldBlock) => Err(libc::EAGAIN),
            Err(e) => match self.take_conn_error(fd, e) {
                None => Ok(0),
                Some(e) => Err(e),
            },
        }
    }
}
