//! Line-buffered forwarding of a rank's stdout or stderr.
//!
//! Whole lines are written at once, so lines of different ranks never interleave
//! mid-line; with `--tag-output` each line is prefixed with `[rank] `.

use std::io::{self, Write};

/// Longest line buffered; a longer one is written in pieces so a rank printing
/// binary data or a huge line without newlines cannot exhaust memory.
pub(crate) const MAX_LINE: usize = 64 * 1024;

pub(crate) struct LineForwarder {
    prefix: Option<Vec<u8>>,
    buf: Vec<u8>,
}

impl LineForwarder {
    pub(crate) fn new(rank: u32, tag: bool) -> LineForwarder {
        LineForwarder {
            prefix: tag.then(|| format!("[{rank}] ").into_bytes()),
            buf: Vec::new(),
        }
    }

    fn emit(&self, out: &mut dyn Write, line: &[u8], add_newline: bool) -> io::Result<()> {
        // One buffer, one write: concurrent writers to the same pipe cannot split it.
        let mut b = Vec::with_capacity(line.len() + 16);
        if let Some(p) = &self.prefix {
            b.extend_from_slice(p);
        }
        b.extend_from_slice(line);
        if add_newline {
            b.push(b'\n');
        }
        out.write_all(&b)
    }

    /// Takes bytes read from the rank and writes every complete line to `out`.
    pub(crate) fn push(&mut self, data: &[u8], out: &mut dyn Write) -> io::Result<()> {
        self.buf.extend_from_slice(data);
        let mut start = 0;
        while let Some(nl) = self.buf[start..].iter().position(|&b| b == b'\n') {
            let end = start + nl + 1;
            self.emit(out, &self.buf[start..end], false)?;
            start = end;
        }
        self.buf.drain(..start);
        if self.buf.len() >= MAX_LINE {
            let chunk = std::mem::take(&mut self.buf);
            // Tagged output stays one line per prefix; untagged stays byte-exact.
            self.emit(out, &chunk, self.prefix.is_some())?;
        }
        out.flush()
    }

    /// End of the stream: writes a partial last line (tagged output gets a newline
    /// so the next rank's line does not start behind it).
    pub(crate) fn finish(&mut self, out: &mut dyn Write) -> io::Result<()> {
        if !self.buf.is_empty() {
            let rest = std::mem::take(&mut self.buf);
            self.emit(out, &rest, self.prefix.is_some())?;
        }
        out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_split_across_reads_and_tagged() {
        let mut out = Vec::new();
        let mut f = LineForwarder::new(3, true);
        f.push(b"hel", &mut out).unwrap();
        assert!(out.is_empty());
        f.push(b"lo\nwor", &mut out).unwrap();
        f.push(b"ld\n\nlast", &mut out).unwrap();
        f.finish(&mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "[3] hello\n[3] world\n[3] \n[3] last\n"
        );
    }

    #[test]
    fn untagged_output_is_byte_exact() {
        let mut out = Vec::new();
        let mut f = LineForwarder::new(0, false);
        f.push(b"a\nb", &mut out).unwrap();
        f.finish(&mut out).unwrap();
        f.finish(&mut out).unwrap();
        assert_eq!(out, b"a\nb");
    }

    #[test]
    fn huge_lines_are_written_in_pieces() {
        let mut out = Vec::new();
        let mut f = LineForwarder::new(1, true);
        f.push(&vec![b'x'; MAX_LINE + 10], &mut out).unwrap();
        assert_eq!(out.len(), 4 + MAX_LINE + 10 + 1);
        let mut out = Vec::new();
        let mut f = LineForwarder::new(1, false);
        f.push(&vec![b'x'; MAX_LINE], &mut out).unwrap();
        f.push(b"y\n", &mut out).unwrap();
        assert_eq!(out.len(), MAX_LINE + 2);
    }
}
