use super::*;
use std::sync::mpsc;

/// `workers` threads take items from `queue` and send them on until it closes.
fn workers(
    queue: &HandOff<u64>,
    n: usize,
) -> (mpsc::Receiver<u64>, Vec<std::thread::JoinHandle<()>>) {
    let (tx, rx) = mpsc::channel();
    let threads = (0..n)
        .map(|_| {
            let (queue, tx) = (queue.clone(), tx.clone());
            std::thread::spawn(move || {
                while let Some(item) = queue.next() {
                    tx.send(item).expect("the test listens");
                }
            })
        })
        .collect();
    (rx, threads)
}

/// Producers push `per` items each, pausing now and then so that workers go from spinning to
/// sleeping and back; every item must arrive once, none stranded in the queue.
fn every_item_once(spin: Duration) {
    let queue = HandOff::new(spin);
    let (taken, threads) = workers(&queue, 3);
    let (producers, per) = (3u64, 2_000u64);
    let pushing: Vec<_> = (0..producers)
        .map(|p| {
            let queue = queue.clone();
            std::thread::spawn(move || {
                for i in 0..per {
                    queue.push(p * per + i).expect("open");
                    if i % 97 == 0 {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                }
            })
        })
        .collect();
    for p in pushing {
        p.join().expect("producer");
    }
    let mut seen = vec![false; (producers * per) as usize];
    for _ in 0..producers * per {
        let item = taken
            .recv_timeout(Duration::from_secs(10))
            .expect("an item left in the queue with no worker awake to take it");
        assert!(
            !std::mem::replace(&mut seen[item as usize], true),
            "{item} twice"
        );
    }
    queue.close();
    for t in threads {
        t.join().expect("worker");
    }
    assert!(taken.try_recv().is_err(), "more items than pushed");
}

#[test]
fn every_item_is_taken_once_with_or_without_spinning() {
    every_item_once(Duration::ZERO);
    every_item_once(Duration::from_micros(1));
    every_item_once(Duration::from_micros(100));
}

#[test]
fn one_item_at_a_time_after_the_spin_ran_out_is_not_stranded() {
    // The worker spins 20 µs after each item; items come 0 to 3 ms apart, so each finds it
    // spinning, going to sleep, or asleep.
    let queue = HandOff::new(Duration::from_micros(20));
    let (taken, threads) = workers(&queue, 1);
    for i in 0..300u64 {
        queue.push(i).expect("open");
        assert_eq!(taken.recv_timeout(Duration::from_secs(10)), Ok(i));
        std::thread::sleep(Duration::from_micros((i % 4) * 1000 / 3 * (i % 3)));
    }
    queue.close();
    for t in threads {
        t.join().expect("worker");
    }
}

#[test]
fn a_closed_queue_refuses_pushes_and_its_workers_drain_it_then_stop() {
    let queue = HandOff::new(Duration::from_micros(10));
    for i in 0..5u64 {
        queue.push(i).expect("open");
    }
    assert_eq!(queue.len(), 5);
    queue.close();
    assert_eq!(queue.push(9), Err(9));
    let (taken, threads) = workers(&queue, 2);
    for t in threads {
        t.join().expect("a worker stopped");
    }
    let mut got: Vec<u64> = taken.try_iter().collect();
    got.sort_unstable();
    assert_eq!(got, vec![0, 1, 2, 3, 4]);
    assert!(queue.is_empty());
}

#[test]
fn sleeping_workers_wake_for_a_close() {
    let queue: HandOff<u64> = HandOff::new(Duration::ZERO);
    let (_taken, threads) = workers(&queue, 2);
    std::thread::sleep(Duration::from_millis(20));
    queue.close();
    for t in threads {
        t.join().expect("a worker stopped");
    }
}

#[test]
fn a_spin_too_long_for_the_clock_ends_with_an_item_or_the_close() {
    let queue = HandOff::new(Duration::MAX);
    let (taken, threads) = workers(&queue, 1);
    queue.push(7).expect("open");
    assert_eq!(taken.recv_timeout(Duration::from_secs(10)), Ok(7));
    queue.close();
    for t in threads {
        t.join().expect("a worker stopped");
    }
}

#[test]
fn take_if_takes_only_the_first_item_and_only_when_wanted() {
    let queue = HandOff::new(Duration::ZERO);
    assert_eq!(queue.take_if(|_| true), None, "empty");
    for n in [10u64, 1, 2] {
        queue.push(n).expect("open");
    }
    // The first item is not wanted: nothing is taken, not even a later one that would be.
    assert_eq!(queue.take_if(|n| *n < 5), None);
    assert_eq!(queue.len(), 3);
    assert_eq!(queue.take_if(|n| *n == 10), Some(10));
    assert_eq!(queue.take_if(|n| *n < 5), Some(1));
    assert_eq!(queue.len(), 1);
    // What is left goes to a worker as usual.
    let (taken, threads) = workers(&queue, 1);
    assert_eq!(taken.recv().expect("the worker sends"), 2);
    queue.close();
    for t in threads {
        t.join().expect("worker");
    }
}
