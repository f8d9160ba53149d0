import type { ServiceConfig } from "../kernel/config";

/**
 * The region a caller's messages should be stored in, from `request.cf` (continent
 * and longitude), mapped onto Durable Object location hint names. Falls back to the
 * default region when the caller's region is unknown (local dev) or not configured.
 */
export function callerRegion(cf: IncomingRequestCfProperties | undefined, config: ServiceConfig): string {
  const guess = cf ? regionFromCf(cf) : undefined;
  return guess && config.regions.includes(guess) ? guess : config.defaultRegion;
}

function regionFromCf(cf: IncomingRequestCfProperties): string | undefined {
  const longitude = Number(cf.longitude);
  switch (cf.continent) {
    case "NA":
      return Number.isFinite(longitude) && longitude < -100 ? "wnam" : "enam";
    case "SA":
      return "sam";
    case "EU":
      return Number.isFinite(longitude) && longitude > 20 ? "eeur" : "weur";
    case "AF":
      return "afr";
    case "OC":
      return "oc";
    case "AS":
      return MIDDLE_EAST.has(String(cf.country)) ? "me" : "apac";
    default:
      return undefined;
  }
}

const MIDDLE_EAST = new Set(["AE", "BH", "IL", "IQ", "IR", "JO", "KW", "LB", "OM", "PS", "QA", "SA", "SY", "TR", "YE"]);
