//! A pcap writer as wire middleware: records every frame its NIC sends and
//! receives.

use std::fs::File;
use std::io::{self, BufWriter};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use super::{Frame, Waker, Wire};
use crate::pcap::PcapWriter;

type Sink = Arc<Mutex<PcapWriter<BufWriter<File>>>>;

/// Flushes a running capture.
#[derive(Clone)]
pub struct CaptureHandle(Sink);

impl CaptureHandle {
    /// Writes out everything recorded so far.
    pub fn flush(&self) -> io::Result<()> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).flush()
    }
}

impl std::fmt::Debug for CaptureHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CaptureHandle")
    }
}

/// A wire around `W` that writes every frame sent through it and every
/// frame received from it to a pcap file (wall-clock time stamps), as
/// Wireshark and tshark read it. The file is complete once the capture is
/// dropped or its handle flushed.
pub struct Capture<W> {
    inner: W,
    sink: Sink,
}

impl<W: Wire> Capture<W> {
    /// Wraps `inner`, creating (or truncating) the file at `path`.
    pub fn create(inner: W, path: impl AsRef<Path>) -> io::Result<(Self, CaptureHandle)> {
        let file = File::create(path)?;
        let sink = Arc::new(Mutex::new(PcapWriter::new(BufWriter::new(file))?));
        Ok((
            Self {
                inner,
                sink: sink.clone(),
            },
            CaptureHandle(sink),
        ))
    }

    fn record(&self, frames: &[Frame]) {
        if frames.is_empty() {
            return;
        }
        let ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let mut w = self.sink.lock().unwrap_or_else(|e| e.into_inner());
        for f in frames {
            if let Err(e) = w.write(ns, f) {
                log::warn!("pcap capture: {e}");
                return;
            }
        }
    }
}

impl<W> Drop for Capture<W> {
    fn drop(&mut self) {
        let _ = self.sink.lock().unwrap_or_else(|e| e.into_inner()).flush();
    }
}

impl<W: Wire> Wire for Capture<W> {
    fn send(&mut self, frames: &mut Vec<Frame>) {
        self.record(frames);
        self.inner.send(frames);
    }

    fn recv(&mut self, out: &mut Vec<Frame>, max: usize) -> usize {
        let start = out.len();
        let n = self.inner.recv(out, max);
        self.record(&out[start..]);
        n
    }

    fn set_waker(&mut self, waker: Waker) {
        self.inner.set_waker(waker);
    }

    fn poll(&mut self, now_ns: u64) {
        self.inner.poll(now_ns);
    }

    fn next_deadline(&self) -> Option<u64> {
        self.inner.next_deadline()
    }

    fn reclaim(&mut self, pool: &mut Vec<Frame>) {
        self.inner.reclaim(pool)
    }

    fn spare(&mut self, frames: &mut Vec<Frame>) {
        self.inner.spare(frames)
    }

    fn link_up(&self) -> bool {
        self.inner.link_up()
    }

    fn in_memory(&self) -> bool {
        self.inner.in_memory()
    }

    fn polled(&self) -> bool {
        self.inner.polled()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::Loopback;

    #[test]
    fn records_both_directions() {
        let dir = std::env::temp_dir().join(format!("rnic-capture-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("loop.pcap");
        let (mut w, h) = Capture::create(Loopback::default(), &path).unwrap();
        w.send(&mut vec![vec![1u8; 60], vec![2u8; 70]]);
        let mut out = Vec::new();
        assert_eq!(w.recv(&mut out, 8), 2);
        h.flush().unwrap();
        let recs = crate::pcap::read(&std::fs::read(&path).unwrap()).unwrap();
        let lens: Vec<usize> = recs.iter().map(|r| r.frame.len()).collect();
        assert_eq!(lens, vec![60, 70, 60, 70], "sent, then received");
        drop(w);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
