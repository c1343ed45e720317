//! Producer and consumer with notifications, the encoder-cache pattern.
//!
//! The producer computes blocks into its region and publishes which ones are ready (here over
//! a channel; in a server, its control plane). The consumer READs them into its own region
//! with a notification; when the notification arrives, the producer knows the consumer has
//! the bytes and frees the blocks for reuse, without a second channel back and without
//! polling the consumer. The consumer never waits for anything but its own READ.
//!
//! ```sh
//! cargo run -p blockwire-example-producer-consumer            # over shm
//! cargo run -p blockwire-example-producer-consumer -- ucx     # with --features ucx
//! ```

use std::collections::BTreeSet;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use blockwire::{PeerId, Region, Transport, TransportOptions, open};

const BLOCKS: u32 = 16;
const BLOCK_LEN: usize = 64 * 1024;
/// Items the producer makes: more than it has blocks, so it must reuse freed ones.
const ITEMS: u32 = 64;

/// What the producer publishes: item `item` is in its block `block`.
struct Ready {
    item: u32,
    block: u32,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let backend = std::env::args().nth(1).unwrap_or_else(|| "shm".into());
    let producer = open(
        &backend,
        Region::new(BLOCKS, BLOCK_LEN)?,
        TransportOptions::default().with_name("producer"),
    )?;
    let consumer = open(
        &backend,
        Region::new(BLOCKS, BLOCK_LEN)?,
        TransportOptions::default().with_name("consumer"),
    )?;
    // The consumer registers the producer (descriptor bytes travel over the control plane);
    // the producer never registers the consumer: it only receives notifications.
    let producer_peer = PeerId::from("producer");
    consumer.add_remote_peer(&producer_peer, &producer.descriptor()?)?;

    let (ready_tx, ready_rx) = mpsc::channel::<Ready>();
    let started = Instant::now();
    std::thread::scope(
        |s| -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
            // The producer: fill a free block, publish it, and free blocks as notifications say
            // the consumer has them.
            let producer_thread = s.spawn(|| -> Result<u32, blockwire::Error> {
                let mut free: BTreeSet<u32> = (0..BLOCKS).collect();
                let mut freed = 0;
                for item in 0..ITEMS {
                    while free.is_empty() {
                        for n in producer.notifications(Some("consumer"))? {
                            if let Some(block) = parse_block(&n.message) {
                                free.insert(block);
                            }
                            freed += 1;
                        }
                        std::thread::sleep(Duration::from_micros(50));
                    }
                    let block = free.pop_first().unwrap_or_default();
                    producer.region().fill_block(block, item as u8)?;
                    if ready_tx.send(Ready { item, block }).is_err() {
                        break;
                    }
                }
                drop(ready_tx);
                // The last notifications.
                while freed < ITEMS {
                    freed += producer.notifications(Some("consumer"))?.len() as u32;
                    std::thread::sleep(Duration::from_micros(50));
                }
                Ok(freed)
            });
            // The consumer: READ each ready block with a notification naming it, check it.
            for ready in ready_rx {
                let local = ready.item % BLOCKS;
                let message = format!("block {}", ready.block);
                let id = consumer.read_blocks_notify(
                    &producer_peer,
                    &[local],
                    &[ready.block],
                    message.as_bytes(),
                )?;
                loop {
                    let r = consumer.poll(Some(&producer_peer))?;
                    if let Some((_, why)) = r.failed.iter().find(|(f, _)| *f == id) {
                        return Err(format!("READ of item {} failed: {why}", ready.item).into());
                    }
                    if r.done.contains(&id) {
                        break;
                    }
                }
                // Done means the bytes are here and the producer was told.
                if consumer.region().block(local)? != vec![ready.item as u8; BLOCK_LEN] {
                    return Err(format!("item {} arrived wrong", ready.item).into());
                }
            }
            let freed = producer_thread
                .join()
                .map_err(|_| "the producer panicked")??;
            println!(
                "{ITEMS} items of {} KiB through {BLOCKS} producer blocks over {backend}: \
             {freed} freed on notification, {:?}",
                BLOCK_LEN / 1024,
                started.elapsed()
            );
            Ok(())
        },
    )
    .map_err(|e| e.to_string())?;
    Ok(())
}

/// The block a notification names (`"block 7"`), if it names one of ours.
fn parse_block(message: &[u8]) -> Option<u32> {
    std::str::from_utf8(message)
        .ok()
        .and_then(|m| m.strip_prefix("block "))
        .and_then(|n| n.parse().ok())
        .filter(|b| *b < BLOCKS)
}
