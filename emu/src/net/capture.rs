//! A pcap writer as wire middleware: a [`Tap`] whose function writes every
//! frame its NIC sends and receives to a pcap file.

use std::fs::File;
use std::io::{self, BufWriter};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use super::{Tap, Wire};
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

/// The tap's hold on the file: written out when the tap goes.
struct Writer(Sink);

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = self.0.lock().unwrap_or_else(|e| e.into_inner()).flush();
    }
}

impl<W: Wire> Tap<W> {
    /// A tap around `inner` that writes every frame sent through it and
    /// every frame received from it to a pcap file at `path` (created or
    /// truncated; wall-clock time stamps), as Wireshark and tshark read
    /// it. Each frame is flushed to the file as it is written.
    pub fn capture(inner: W, path: impl AsRef<Path>) -> io::Result<(Self, CaptureHandle)> {
        let file = File::create(path)?;
        let sink: Sink = Arc::new(Mutex::new(PcapWriter::new(BufWriter::new(file))?));
        let writer = Writer(sink.clone());
        let record = move |_, frame: &[u8]| {
            let ns = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            let mut w = writer.0.lock().unwrap_or_else(|e| e.into_inner());
            // Flushed frame by frame: a program that exits without
            // closing its device (exit() skips destructors) leaves a
            // complete capture.
            if let Err(e) = w.write(ns, frame).and_then(|()| w.flush()) {
                log::warn!("pcap capture: {e}");
            }
        };
        Ok((Tap::new(inner, Arc::new(record)), CaptureHandle(sink)))
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
        let (mut w, h) = Tap::capture(Loopback::default(), &path).unwrap();
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
