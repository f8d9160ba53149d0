export const DEV_CONFIG: string;
export function writeDevConfig(opts?: { file?: string; consumers?: Array<{ binding: string; service: string }> }): string;
