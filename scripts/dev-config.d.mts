export const DEV_CONFIG: string;
export function writeDevConfig(opts?: { file?: string; consumers?: Array<{ binding: string; service: string }>; vars?: Record<string, string> }): string;
