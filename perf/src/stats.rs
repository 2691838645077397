//! Latency statistics and perftest's report columns.

/// Latency samples in nanoseconds, summarized as perftest does.
pub struct Latency {
    /// Sorted samples.
    sorted: Vec<f64>,
}

impl Latency {
    /// The summary of `samples` (nanoseconds).
    pub fn new(mut samples: Vec<f64>) -> Self {
        samples.sort_by(f64::total_cmp);
        Self { sorted: samples }
    }

    fn at(&self, q: f64) -> f64 {
        if self.sorted.is_empty() {
            return 0.0;
        }
        let i = ((self.sorted.len() - 1) as f64 * q).round() as usize;
        self.sorted[i]
    }

    /// The median: perftest's `t_typical`.
    pub fn typical(&self) -> f64 {
        self.at(0.5)
    }

    /// The 99.9th percentile as a multiple of the median: how heavy the
    /// tail is.
    pub fn tail(&self) -> f64 {
        let t = self.typical();
        if t > 0.0 {
            self.at(0.999) / t
        } else {
            0.0
        }
    }

    /// Mean.
    pub fn avg(&self) -> f64 {
        self.sorted.iter().sum::<f64>() / self.sorted.len().max(1) as f64
    }

    fn stdev(&self) -> f64 {
        let m = self.avg();
        let var = self.sorted.iter().map(|x| (x - m) * (x - m)).sum::<f64>()
            / self.sorted.len().max(1) as f64;
        var.sqrt()
    }

    /// The header of [`Latency::row`].
    pub fn header() -> String {
        format!(
            " {:<10} {:<12} {:>12} {:>12} {:>16} {:>12} {:>14} {:>22} {:>24}",
            "#bytes",
            "#iterations",
            "t_min[usec]",
            "t_max[usec]",
            "t_typical[usec]",
            "t_avg[usec]",
            "t_stdev[usec]",
            "99% percentile[usec]",
            "99.9% percentile[usec]"
        )
    }

    /// perftest's latency row for messages of `size` bytes.
    pub fn row(&self, size: usize) -> String {
        let us = |ns: f64| ns / 1000.0;
        format!(
            " {:<10} {:<12} {:>12.2} {:>12.2} {:>16.2} {:>12.2} {:>14.2} {:>22.2} {:>24.2}",
            size,
            self.sorted.len(),
            us(self.at(0.0)),
            us(self.at(1.0)),
            us(self.typical()),
            us(self.avg()),
            us(self.stdev()),
            us(self.at(0.99)),
            us(self.at(0.999))
        )
    }
}

/// A bandwidth measurement: `iters` messages of `size` bytes in
/// `seconds`, and the best rate of any window of them.
pub struct Bandwidth {
    pub size: usize,
    pub iters: u64,
    pub seconds: f64,
    /// Bytes per second in the fastest window.
    pub peak: f64,
}

impl Bandwidth {
    /// Average bytes per second.
    pub fn average(&self) -> f64 {
        (self.size as u64 * self.iters) as f64 / self.seconds
    }

    /// Messages per second.
    pub fn msg_rate(&self) -> f64 {
        self.iters as f64 / self.seconds
    }

    /// The header of [`Bandwidth::row`].
    pub fn header(gbits: bool) -> String {
        let unit = if gbits { "Gb/sec" } else { "MB/sec" };
        format!(
            " {:<10} {:<12} {:>18} {:>22} {:>16}",
            "#bytes",
            "#iterations",
            format!("BW peak[{unit}]"),
            format!("BW average[{unit}]"),
            "MsgRate[Mpps]"
        )
    }

    /// perftest's bandwidth row.
    pub fn row(&self, gbits: bool) -> String {
        let conv = |bps: f64| {
            if gbits {
                bps * 8.0 / 1e9
            } else {
                bps / (1u64 << 20) as f64
            }
        };
        format!(
            " {:<10} {:<12} {:>18.2} {:>22.2} {:>16.6}",
            self.size,
            self.iters,
            conv(self.peak),
            conv(self.average()),
            self.msg_rate() / 1e6
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_columns() {
        let l = Latency::new((1..=1000).rev().map(f64::from).collect());
        assert_eq!(l.typical(), 501.0);
        assert_eq!(l.at(0.999), 999.0);
        assert_eq!(l.avg(), 500.5);
        assert_eq!(l.tail(), 999.0 / 501.0);
        let row = l.row(8);
        assert!(row.contains(" 8 ") && row.contains("1000"), "{row}");
        let b = Bandwidth {
            size: 1 << 20,
            iters: 100,
            seconds: 1.0,
            peak: 2.0 * (100u64 << 20) as f64,
        };
        assert_eq!(b.average(), (100u64 << 20) as f64);
        assert!(b.row(false).contains("100.00"), "{}", b.row(false));
    }
}
