#!/usr/bin/env bash
# Writes the hand-made seed inputs of every fuzz target into fuzz/corpus/<target>/seed-*
# (bash and printf only). The committed corpus is these seeds plus what `cargo fuzz cmin`
# kept from earlier runs; rerun this after changing the descriptor encoding (layout in
# crates/core/src/descriptor.rs), then minimize (see scripts/fuzz.sh).
set -euo pipefail
cd "$(dirname "$0")"

# Little-endian integers as printf escapes (expand them with printf "$(...)").
le() { # le BYTES VALUE
    local n=$1 v=$2 out="" i
    for ((i = 0; i < n; i++)); do
        out+=$(printf '\\x%02x' $(((v >> (8 * i)) & 0xff)))
    done
    printf '%s' "$out"
}
u8() { le 1 "$1"; }
u16() { le 2 "$1"; }
u32() { le 4 "$1"; }
u64() { le 8 "$1"; }
str() { printf '%s' "$1"; }

# desc KIND FINGERPRINT BASE NUM_BLOCKS BLOCK_LEN ADDRESS_ESCAPES [NAME]: an encoded descriptor
# (format version 2: the transport's name follows the fingerprint).
desc() {
    local addr name=${7:-}
    addr=$(printf "$6" | wc -c)
    printf "BWPD$(u16 2)$(u8 ${#1})$(str "$1")$(u8 ${#2})$(str "$2")$(u8 ${#name})$(str "$name")$(u64 "$3")$(u32 "$4")$(u64 "$5")$(u32 "$addr")$6"
}
# An shm address (as printf escapes): magic, pid, start time, token, identity record address.
shm_addr() { printf '%s' "SHM1$(u32 "$1")$(u64 "$2")$(u64 "$3")$(u64 "$4")"; }

out() { mkdir -p "corpus/$1" && cat >"corpus/$1/seed-$2"; }

t=descriptor_decode
desc shm "" $((0x1000)) 1 1 "" | out $t valid-minimal
desc shm 0123456789abcdef $((0x7f0000000000)) 16 4096 "$(shm_addr 4242 987654 3 $((0x55550000)))" | out $t valid-shm
desc ucx "" $((0x200000)) 1024 65536 '\x01\x02\x03\x04\x05\x06\x07\x08' | out $t valid-ucx
desc nixl ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff 0 4 64 'agent' | out $t valid-long-fingerprint
desc shm "" $((0x1000)) 4 64 "" | head -c 20 | out $t truncated
desc shm "" $((0x1000)) 4 64 "" prefill-0 | out $t valid-named
desc shm "" $((0x1000)) 4 64 "" $'bad\x01name' | out $t bad-name
printf 'BWPX\x01\x00' | out $t bad-magic
printf "BWPD$(u16 2)" | out $t version-2
{ desc shm "" $((0x1000)) 1 1 ""; printf '\x00'; } | out $t trailing-byte
desc shm "" 0 $((0xffffffff)) $((0x7fffffffffffffff)) "" | out $t size-overflow
desc shm "" -100 1 4096 "" | out $t end-overflow
desc shm "" $((0x1000)) 0 64 "" | out $t zero-blocks
desc "Sh M" XYZ $((0x1000)) 1 64 "" | out $t bad-kind-fingerprint
printf "BWPD$(u16 2)$(u8 3)shm$(u8 0)$(u8 0)$(u64 4096)$(u32 1)$(u64 1)$(u32 0xffffffff)" | out $t huge-address-length

# add_remote_peer: first byte 0 = descriptor bytes, 1 = template with this shm address,
# 2 = template XOR the rest (address, base, blocks, block length; all zero = unchanged),
# 3 = a live process without a region (see the target's docs).
t=add_remote_peer
{ printf '\x00'; desc shm "" $((0x7f0000000000)) 4 64 "$(shm_addr 1 1 1 $((0x1000)))"; } | out $t desc-other-process
{ printf '\x00'; desc shm "" $((0x1000)) 4 128 "" ; } | out $t desc-block-len-mismatch
{ printf '\x00'; desc ucx "" $((0x1000)) 4 64 "x"; } | out $t desc-other-backend
{ printf '\x00'; desc shm abcdef $((0x1000)) 4 64 "x"; } | out $t desc-fingerprint
printf '\x01' | out $t addr-empty
printf '\x01\xde\xad' | out $t addr-short
printf "\\x01$(shm_addr 1 0 0 0)" | out $t addr-pid1
printf "\\x01$(shm_addr 0 0 0 0)" | out $t addr-pid0
printf "\\x01$(shm_addr $((0x80000000)) 0 0 0)" | out $t addr-pid-negative
printf '\x02' | out $t template-unchanged
{ printf '\x02'; head -c 16 /dev/zero; printf "$(u64 1)"; } | out $t template-other-token
{ printf '\x02'; head -c 32 /dev/zero; printf "$(u64 $((0x1000)))"; } | out $t template-other-base
{ printf '\x02'; head -c 40 /dev/zero; printf "$(u32 3)"; } | out $t template-other-blocks
{ printf '\x02'; printf '\x00\x00\x00\x00\x01'; } | out $t template-other-pid
# 3 = an shm address naming the parent process, then token, identity address, base, blocks.
printf "\\x03$(u64 2)$(u64 $((0x7f0000001000)))" | out $t other-process
printf "\\x03$(u64 2)$(u64 0)" | out $t other-process-identity-null
# The other backends (fuzz features ucx, libfabric: first byte / 4 picks ucx, libfabric tcp,
# libfabric shm), modes 2 (the registered region before the address's seal XOR the first 20
# bytes, then the descriptor's fields) and 3 (the descriptor's fields only): unchanged, block 0
# shifted, a block more (in the descriptor, or in it and the address alike: the seal refuses
# that one), the blocks split differently.
for b in 1 2 3; do
    m2=$(printf '\\x%02x' $((b * 4 + 2)))
    m3=$(printf '\\x%02x' $((b * 4 + 3)))
    printf "$m2" | out $t "backend$b-unchanged"
    { printf "$m2"; printf "$(u64 64)"; } | out $t "backend$b-address-base"
    { printf "$m2"; head -c 20 /dev/zero; printf "$(u64 64)$(u32 1)"; } | out $t "backend$b-base-and-blocks"
    { printf "$m2$(u64 0)$(u32 1)$(u64 0)$(u64 0)$(u32 1)"; } | out $t "backend$b-blocks-in-address-too"
    { printf "$m3"; printf "$(u64 0)$(u32 $((4 ^ 5)))"; } | out $t "backend$b-a-block-more"
    { printf "$m3"; printf "$(u64 0)$(u32 $((4 ^ 8)))$(u64 $((64 ^ 32)))"; } | out $t "backend$b-split"
done

# block_indices: flags (1: initiate from b, 2: read, 4: own remote length), local length,
# [remote length], then indices (a byte & 15; 0xff then a u32).
t=block_indices
printf '\x00\x02\x00\x01\x02\x03' | out $t write-two
printf '\x02\x03\x05\x06\x07\x00\x01\x05' | out $t read-three
printf '\x01\x02\x07\x00\x05\x04' | out $t write-from-b
printf '\x00\x01\x00\x06' | out $t write-remote-out-of-range
printf '\x00\x01\x08\x00' | out $t write-local-out-of-range
printf '\x00\x02\x00\x01\x03\x03' | out $t write-duplicate-destination
printf '\x02\x02\x04\x04\x00\x01' | out $t read-duplicate-destination
printf '\x04\x02\x01\x00\x01\x02' | out $t length-mismatch
printf '\x00\x00' | out $t empty
printf '\x00\x01\xff\xff\xff\xff\xff\x00' | out $t index-u32-max
