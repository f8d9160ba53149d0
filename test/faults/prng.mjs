// A seeded pseudo-random generator (sfc32, seeded through cyrb128), so a fault run is
// replayable: every actor (each producer, each consumer, the fault schedule) draws
// from its own stream derived from the run's seed and the actor's name, so what one
// actor decides does not depend on how the others interleave with it.

/**
 * @typedef {object} Rng
 * @property {() => number} next            a number in [0, 1)
 * @property {(min: number, max: number) => number} int   an integer in [min, max]
 * @property {(min: number, max: number) => number} between a number in [min, max)
 * @property {(p: number) => boolean} chance  true with probability p
 * @property {<T>(items: readonly T[]) => T} pick
 */

/**
 * @param {number | string} seed
 * @param {...(string | number)} stream  names the actor: ("producer", 2)
 * @returns {Rng}
 */
export function prng(seed, ...stream) {
  let [a, b, c, d] = cyrb128([String(seed), ...stream.map(String)].join("/"));
  const next = () => {
    a >>>= 0;
    b >>>= 0;
    c >>>= 0;
    d >>>= 0;
    let t = (a + b) | 0;
    a = b ^ (b >>> 9);
    b = (c + (c << 3)) | 0;
    c = (c << 21) | (c >>> 11);
    d = (d + 1) | 0;
    t = (t + d) | 0;
    c = (c + t) | 0;
    return (t >>> 0) / 4294967296;
  };
  // Warm up: the first outputs of sfc32 are weakly mixed.
  for (let i = 0; i < 15; i++) next();
  return {
    next,
    int: (min, max) => min + Math.floor(next() * (max - min + 1)),
    between: (min, max) => min + next() * (max - min),
    chance: (p) => next() < p,
    pick: (items) => {
      if (items.length === 0) throw new Error("pick from an empty list");
      return /** @type {any} */ (items[Math.floor(next() * items.length)]);
    },
  };
}

/** A fresh seed for a run that was not given one: a positive 31-bit integer. */
export function randomSeed() {
  return 1 + Math.floor(Math.random() * 0x7ffffffe);
}

/**
 * Four 32-bit words from a string (bryc's cyrb128).
 * @param {string} str
 * @returns {[number, number, number, number]}
 */
function cyrb128(str) {
  let h1 = 1779033703;
  let h2 = 3144134277;
  let h3 = 1013904242;
  let h4 = 2773480762;
  for (let i = 0; i < str.length; i++) {
    const k = str.charCodeAt(i);
    h1 = h2 ^ Math.imul(h1 ^ k, 597399067);
    h2 = h3 ^ Math.imul(h2 ^ k, 2869860233);
    h3 = h4 ^ Math.imul(h3 ^ k, 951274213);
    h4 = h1 ^ Math.imul(h4 ^ k, 2716044179);
  }
  h1 = Math.imul(h3 ^ (h1 >>> 18), 597399067);
  h2 = Math.imul(h4 ^ (h2 >>> 22), 2869860233);
  h3 = Math.imul(h1 ^ (h3 >>> 17), 951274213);
  h4 = Math.imul(h2 ^ (h4 >>> 19), 2716044179);
  h1 ^= h2 ^ h3 ^ h4;
  h2 ^= h1;
  h3 ^= h1;
  h4 ^= h1;
  return [h1 >>> 0, h2 >>> 0, h3 >>> 0, h4 >>> 0];
}
