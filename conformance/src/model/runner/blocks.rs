//! Comparing every block of every transport with the model.

use blockwire::Transport;

use super::super::expected::Fill;
use super::super::reference::Model;
use super::super::state::stamp_bytes;
use super::{Runner, Step};

impl<T: Transport> Runner<'_, T> {
    /// The transport of space `space` (0: local, 1 + r: remote r).
    pub(super) fn space(&self, space: usize) -> &T {
        if space == 0 {
            &self.local
        } else {
            &self.remotes[space - 1]
        }
    }

    /// Writes fresh content into source blocks, as the model chose it.
    pub(super) fn fill(&mut self, fill: &[Fill]) -> Step {
        for f in fill {
            stamp_bytes(f.stamp, &mut self.buf);
            self.space(f.space)
                .region()
                .write_block(f.block, &self.buf)
                .map_err(|e| format!("writing a source block: {}", e.report()))?;
        }
        Ok(())
    }

    /// Every block whose content the model knows must hold it.
    pub(super) fn verify(&mut self, when: &str) -> Step {
        let mut wrong = Vec::new();
        let mut got = vec![0u8; self.setup.block_len];
        for (space, block, stamp) in self.model.known_blocks() {
            self.space(space)
                .region()
                .read_block(block, &mut got)
                .map_err(|e| format!("reading a block: {}", e.report()))?;
            stamp_bytes(stamp, &mut self.buf);
            if got != self.buf {
                wrong.push(format!(
                    "{}[{block}] should hold {} but holds {}",
                    Model::space_name(space),
                    self.model.describe(stamp),
                    self.model.identify(&got)
                ));
            }
        }
        if wrong.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{when}: {} blocks differ from the model: {}",
                wrong.len(),
                wrong.join("; ")
            ))
        }
    }
}
